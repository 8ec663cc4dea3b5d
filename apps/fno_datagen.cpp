// fno_datagen: generates PDE data into HDF5 files that fno_train reads
// directly: Darcy flow as in the FNO paper (Li et al. 2020, appendix A.3.2;
// --problem darcy, the default; fno_data/darcy_gen.h describes the problem, the
// scheme and the solver), the periodic 3D Poisson problem for 3D models
// (--problem poisson3d; fno_data/poisson3d_gen.h), or 2D Navier-Stokes as in
// the FNO paper (--problem ns; fno_data/navier_stokes_gen.h).
//
// Nothing is written over: an output file that exists is refused before any
// work; --resume goes on only with the kept samples' settings, --initial's
// contents included (its size and hash), and touches no file it did not write.
//
// Exit codes: 0 done; 2 bad command line (an output that exists; with --resume
// also: other settings or another --initial than the kept samples'); 3 the run
// failed (output not writable, stdout included, solver failure, a
// Navier-Stokes run that blew up, damaged or foreign files where --resume
// keeps its samples); 4 stopped at
// --stop-after-samples; 130/143 stopped by SIGINT/SIGTERM. A run that stops for
// any reason leaves no output file (temporary file + fsync + rename); with
// --resume, the finished batches stay in OUT.partial/ and the same command
// with --resume goes on after them.
#include <fno_data/darcy_gen.h>
#include <fno_data/navier_stokes_gen.h>
#include <fno_data/poisson3d_gen.h>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"

namespace {

const fno::cli::Fail fail("fno_datagen");

using fno::cli::flushed;
using fno::cli::non_negative_integer;

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // the run polls the flag; no write (progress, HDF5) sees EINTR
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

/// The command line, each argument quoted when it holds a space or quote;
/// without --resume, --stop-after-samples and --worker, which do not change
/// the data (so that a resumed run writes the same bytes as one run).
std::string command_line(int argc, char** argv) {
  std::string out;
  bool first = true;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--resume" || arg.rfind("--stop-after-samples=", 0) == 0 ||
        arg.rfind("--worker=", 0) == 0)
      continue;
    if (arg == "--stop-after-samples" || arg == "--worker") {
      ++i;
      continue;
    }
    if (!first) out += ' ';
    first = false;
    if (!arg.empty() && arg.find_first_of(" \t'\"\\$") == std::string::npos) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

/// A progress bar on a terminal (one line redrawn), plain lines every 10%
/// otherwise, or nothing; `header` comes first, once the first batch is done
/// (so that a run refused at the start prints one line only).
class Progress {
 public:
  Progress(const std::string& mode, std::string header, const char* unit = "samples")
      : header_(std::move(header)), unit_(unit) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    bar_ = mode == "bar" || (mode == "auto" && tty);
    plain_ = mode == "plain" || (mode == "auto" && !tty);
  }
  void update(int64_t done, int64_t total) {
    if (!header_.empty() && (bar_ || plain_))
      std::fprintf(stderr, "fno_datagen: %s\n", header_.c_str());
    header_.clear();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double eta = done > base_ ? secs * static_cast<double>(total - done) /
                                          static_cast<double>(done - base_)
                                    : 0;
    const int pct = static_cast<int>(100 * done / total);
    if (bar_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * done / total);
      std::string bar(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(kWidth - filled), '.');
      std::fprintf(stderr, "\r[%s] %lld/%lld %3d%%  %.0fs  eta %.0fs ", bar.c_str(),
                   static_cast<long long>(done), static_cast<long long>(total), pct, secs, eta);
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    } else if (plain_ && (pct >= next_pct_ || done == total)) {
      std::fprintf(stderr, "fno_datagen: %lld/%lld %s (%d%%), %.1fs\n",
                   static_cast<long long>(done), static_cast<long long>(total), unit_, pct, secs);
      next_pct_ = pct / 10 * 10 + 10;
    }
  }
  void abandon() {
    if (bar_ && header_.empty()) std::fprintf(stderr, "\n");
  }
  /// A resumed run: `done` units were made before; the header, then `note`.
  void resumed(int64_t done, const std::string& note) {
    base_ = done;
    if (bar_ || plain_) {
      std::fprintf(stderr, "fno_datagen: %s\n", header_.c_str());
      std::fprintf(stderr, "fno_datagen: %s\n", note.c_str());
    }
    header_.clear();
  }

 private:
  std::string header_;
  const char* unit_;
  bool bar_ = false;
  bool plain_ = false;
  int next_pct_ = 10;
  int64_t base_ = 0;  // units made before this run (a resumed run)
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace

namespace {

/// What a run generates, once its options are valid: the header's grid text,
/// the files, and the run itself.
struct Job {
  std::string grid;  // "16x16" / "16x16x16" ("... (stored 8x8)")
  std::vector<std::string> paths;
  std::function<fno::data::DarcyGenSummary(const fno::data::DarcyGenHooks&)> run;
  const char* unit = "samples";  // what the progress counts
  int64_t units_per_sample = 1;
};

std::string grid_text(int64_t r, int dims) {
  std::string text = std::to_string(r);
  for (int i = 1; i < dims; ++i) text += "x" + std::to_string(r);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef __GLIBC__
  // The solvers' FFTs allocate and free buffers of a few hundred KiB every
  // step on the CPU; glibc's adaptive thresholds can hand them back to the
  // system and fault them in again each time. Fixed thresholds keep them.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  CLI::App app{
      "Generates PDE data into HDF5 files that fno_train reads directly.\n"
      "--problem darcy (default): Darcy flow as in the FNO paper (Li et al. 2020, appendix "
      "A.3.2):\n"
      "-div(a grad u) = 1 on the unit square, u = 0 on the boundary, a = 12 or 3 by the sign\n"
      "of a Gaussian random field with covariance 9 (-Laplacian + 9)^-2 (zero Neumann), solved\n"
      "by second-order finite differences on the R x R node grid (boundary included); datasets\n"
      "coeff = a and sol = u, float32 (N, R', R').\n"
      "--problem poisson3d: -Laplace(u) = f on the periodic unit cube, f a zero-mean Gaussian\n"
      "random field with covariance 9 (-Laplacian + 9)^-2.5, u its exact spectral solution, on\n"
      "the R x R x R grid x_i = i/R; coeff = f, sol = u, (N, R', R', R').\n"
      "--problem ns: 2D incompressible Navier-Stokes in vorticity form on the unit torus as in\n"
      "the FNO paper (appendix A.3.3): dw/dt + u.grad(w) = nu Laplace(w) + f, w0 a Gaussian\n"
      "random field of covariance 7^1.5 (-Laplacian + 49)^-2.5, f = 0.1 (sin 2pi(x+y) + cos\n"
      "2pi(x+y)); pseudo-spectral, 2/3 dealiasing, Crank-Nicolson diffusion, on the R x R grid\n"
      "x_i = i/R; datasets a = w0 (N, R', R') and u (N, R', R', T), record r at (r+1) "
      "record_every."};
  fno::data::DarcyGenOptions o;
  fno::data::NavierStokesGenOptions ons;
  int64_t resolution = 0, samples = 0, test_samples = 0, subsample = 1, batch = 0;
  uint64_t seed = 0;
  double tolerance = o.tolerance();
  double viscosity = ons.viscosity(), dt = ons.dt(), t_final = ons.t_final(),
         record_every = ons.record_every();
  std::string problem = "darcy", out, device = "auto", progress = "auto", forcing = "paper",
              initial, precision = ons.precision();
  bool no_cuda_graph = false;
  app.add_option("--problem", problem, "darcy (default), poisson3d or ns")
      ->check(CLI::IsMember({"darcy", "poisson3d", "ns"}));
  app.add_option("--resolution", resolution,
                 "grid points per side: darcy, nodes of the solve, boundary included (>= 3); "
                 "poisson3d, points of the periodic grid (>= 4); ns, points of the periodic "
                 "grid of the solve (even, >= 8; the paper: 256)")
      ->required()
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--samples", samples, "number of samples in all")
      ->required()
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--seed", seed, "seed; sample i depends only on (seed, i)")
      ->required()
      ->transform(non_negative_integer<uint64_t>());
  app.add_option("--out", out,
                 "output file (.h5); with --test-samples, STEM_train.h5 and STEM_test.h5")
      ->required();
  app.add_option("--test-samples", test_samples,
                 "put the last N samples into STEM_test.h5, the others into STEM_train.h5 "
                 "(default 0: one file)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--subsample", subsample,
                 "store every k-th node per side; darcy: k must divide resolution - 1 "
                 "(421 with k = 5, 3, 2 gives 85, 141, 211); poisson3d and ns: k must divide "
                 "resolution (ns, the paper: 256 with k = 4 gives 64)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--batch", batch,
                 "samples solved together (default 1 on the CPU; on CUDA 32 for darcy, "
                 "2^24 / R^3 within [1, 32] for poisson3d, for ns as many as fit in the free GPU "
                 "memory, a power of 2, at most 256 and --samples); on the CPU the data do not "
                 "depend on it")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--device", device, "auto (CUDA when available), cpu, cuda or cuda:N");
  app.add_option("--tolerance", tolerance,
                 "darcy: relative residual at which CG stops (default 1e-10)");
  app.add_option("--viscosity", viscosity, "ns: the viscosity nu, > 0 (default 1e-3)");
  app.add_option("--dt", dt, "ns: the time step (default 1e-4)");
  app.add_option("--t-final", t_final, "ns: the final time T, a whole number of records (default 50)");
  app.add_option("--record-every", record_every,
                 "ns: the time between records, a whole number of steps (default 1)");
  app.add_option("--forcing", forcing, "ns: paper (default) or none")
      ->check(CLI::IsMember({"paper", "none"}));
  app.add_option("--precision", precision,
                 "ns: the solve's precision, float64 (default) or float32 (the FNO paper's; about "
                 "half the memory traffic)")
      ->check(CLI::IsMember({"float64", "float32"}));
  app.add_flag("--no-cuda-graph", no_cuda_graph,
               "ns: on CUDA, launch every step's kernels instead of replaying CUDA graphs (the "
               "same numbers; for timing)");
  app.add_option("--initial", initial,
                 "ns: an HDF5 file whose dataset w0 (N, R, R) gives the initial vorticity of "
                 "the first N >= --samples samples (default: the paper's random field)");
  bool resume = false;
  int64_t stop_after = 0;
  app.add_flag("--resume", resume,
               "keep each finished batch in OUT.partial/ and go on after the samples kept "
               "there by an earlier run with the same settings; at the end write the output "
               "(the same bytes as one run) and remove OUT.partial/");
  app.add_option("--stop-after-samples", stop_after,
                 "with --resume: stop (exit 4) once at least K samples are kept (for tests)")
      ->transform(non_negative_integer<int64_t>());
  std::string worker_text;
  app.add_option("--worker", worker_text,
                 "K/N, with --resume: worker K (0 .. N-1) of N processes making one run together "
                 "in the same OUT.partial/ (one per GPU: --device cuda:K); it makes the batches "
                 "j with j % N == K and ends without the output; then the same command without "
                 "--worker writes it (the same bytes as one run)");
  app.add_option("--progress", progress, "auto (a bar on a terminal, else lines), bar, plain, none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return flushed(fail, app.exit(e));
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }

  if (problem != "darcy" && app.count("--tolerance") > 0) {
    return fail(2, "--tolerance applies to --problem darcy only");
  }
  if (problem != "ns") {
    for (const char* flag : {"--viscosity", "--dt", "--t-final", "--record-every", "--forcing",
                             "--initial", "--precision", "--no-cuda-graph"}) {
      if (app.count(flag) > 0) return fail(2, std::string(flag) + " applies to --problem ns only");
    }
  }
  if (stop_after > 0 && !resume) return fail(2, "--stop-after-samples needs --resume");
  int worker = 0, workers = 1;
  if (!worker_text.empty()) {
    long long k = -1, n = 0;
    char tail = 0;
    if (std::sscanf(worker_text.c_str(), "%lld/%lld%c", &k, &n, &tail) != 2 || n < 1 || k < 0 ||
        k >= n || n > 1024) {
      return fail(2, "--worker " + worker_text + ": expected K/N with 0 <= K < N, e.g. 0/2");
    }
    if (!resume) return fail(2, "--worker needs --resume");
    worker = static_cast<int>(k);
    workers = static_cast<int>(n);
  }
  const std::string line = command_line(argc, argv);
  Job job;
  try {
    if (problem == "darcy") {
      o.resolution(resolution)
          .samples(samples)
          .seed(seed)
          .test_samples(test_samples)
          .subsample(subsample)
          .tolerance(tolerance)
          .batch_size(batch)
          .device(device)
          .out(out)
          .command_line(line);
      fno::data::validate_darcy_options(o);
      job.grid = grid_text(resolution, 2);
      if (subsample > 1) job.grid += " (stored " + grid_text((resolution - 1) / subsample + 1, 2) + ")";
      job.paths = fno::data::darcy_output_paths(o);
      job.run = [&](const fno::data::DarcyGenHooks& h) { return fno::data::generate_darcy(o, h); };
    } else if (problem == "poisson3d") {
      fno::data::Poisson3dGenOptions o3;
      o3.resolution(resolution)
          .samples(samples)
          .seed(seed)
          .test_samples(test_samples)
          .subsample(subsample)
          .batch_size(batch)
          .device(device)
          .out(out)
          .command_line(line);
      fno::data::validate_poisson3d_options(o3);
      job.grid = grid_text(resolution, 3);
      if (subsample > 1) job.grid += " (stored " + grid_text(resolution / subsample, 3) + ")";
      job.paths = fno::data::poisson3d_output_paths(o3);
      job.run = [o3](const fno::data::DarcyGenHooks& h) {
        return fno::data::generate_poisson3d(o3, h);
      };
    } else {
      ons.resolution(resolution)
          .samples(samples)
          .seed(seed)
          .test_samples(test_samples)
          .subsample(subsample)
          .viscosity(viscosity)
          .dt(dt)
          .t_final(t_final)
          .record_every(record_every)
          .forcing(forcing)
          .initial(initial)
          .precision(precision)
          .cuda_graph(!no_cuda_graph)
          .batch_size(batch)
          .device(device)
          .out(out)
          .command_line(line);
      fno::data::validate_navier_stokes_options(ons);
      job.grid = grid_text(resolution, 2);
      if (subsample > 1) job.grid += " (stored " + grid_text(resolution / subsample, 2) + ")";
      const auto records = fno::data::ns_schedule(ons).second;
      job.grid += ", " + std::to_string(records) + " records";
      job.paths = fno::data::navier_stokes_output_paths(ons);
      job.run = [&](const fno::data::DarcyGenHooks& h) {
        return fno::data::generate_navier_stokes(ons, h);
      };
      job.unit = "records";
      job.units_per_sample = records;
    }
  } catch (const c10::Error& e) {
    return fail(2, e.what_without_backtrace());
  }
  // "12 samples at 16x16 (stored 8x8), seed 0 -> FILES"
  std::string header = std::to_string(samples) + " samples at " + job.grid + ", seed " +
                       std::to_string(seed) + " ->";
  for (const auto& p : job.paths) header += " " + p;
  Progress bar(progress, header, job.unit);
  install_stop_handlers();
  fno::data::DarcyGenHooks hooks;
  hooks.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
  hooks.stop_requested = [] { return static_cast<int>(g_stop_signal); };
  hooks.resume = resume;
  hooks.stop_after_samples = stop_after;
  hooks.worker = worker;
  hooks.workers = workers;
  hooks.resumed = [&](int64_t kept, int64_t total) {
    bar.resumed(kept * job.units_per_sample,
                kept == 0 ? "resumable: finished batches go to '" +
                                fno::data::datagen_partial_dir(out) + "'"
                          : "resuming: " + std::to_string(kept) + " of " +
                                std::to_string(total) + " samples kept in '" +
                                fno::data::datagen_partial_dir(out) + "'");
  };
  try {
    const auto summary = job.run(hooks);
    if (!summary.written) {
      bar.abandon();
      std::printf(
          "worker %d/%d: its batches are kept; %lld of %lld samples kept in %s; the "
          "same command without --worker writes the output once all workers are done\n",
          worker, workers, static_cast<long long>(summary.kept),
          static_cast<long long>(summary.samples), fno::data::datagen_partial_dir(out).c_str());
      std::printf("device %s\n", summary.device.c_str());
      std::printf("seconds %.2f\n", summary.seconds);
      return flushed(fail);
    }
    std::printf("device %s\n", summary.device.c_str());
    std::printf("samples %lld\n", static_cast<long long>(summary.samples));
    std::printf("seconds %.2f\n", summary.seconds);
    if (problem == "ns") {
      std::printf("max_abs_vorticity %.4g\n", summary.max_abs);
      std::printf("batch %lld\n", static_cast<long long>(summary.batch));
      std::printf("solve_seconds %.3f\n", summary.solve_seconds);
    } else {
      std::printf("max_residual %.3g\n", summary.max_residual);
    }
    if (problem == "darcy") {
      std::printf("cg_iterations mean %.1f max %lld\n", summary.mean_iterations,
                  static_cast<long long>(summary.max_iterations));
    }
    for (const auto& f : summary.files) std::printf("wrote %s\n", f.c_str());
    return flushed(fail);
  } catch (const fno::data::DatagenInterrupted& e) {
    bar.abandon();
    return fail(e.signal() == 0 ? 4 : 128 + e.signal(), e.what());
  } catch (const fno::data::NsBlowUp& e) {
    bar.abandon();
    return fail(3, e.what());
  } catch (const c10::ValueError& e) {
    bar.abandon();
    return fail(2, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    bar.abandon();
    return fail(3, e.what_without_backtrace());
  } catch (const std::exception& e) {
    bar.abandon();
    return fail(3, e.what());
  }
}
