// fno_datagen's run (fno_data/datagen.h): the options of the problem asked
// for, the header and progress on stderr, the stop signals, the summary.
#include <fno_data/datagen.h>

#include <c10/util/Exception.h>

#include <signal.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fno::data {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
// (C linkage makes the name global even here, so it is the library's own.)
extern "C" void fno_datagen_on_stop_signal(int sig) { g_stop_signal = sig; }

/// SIGINT and SIGTERM set a flag that the run polls, for its lifetime.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = fno_datagen_on_stop_signal;
    sa.sa_flags = SA_RESTART;  // the run polls the flag; no write (progress, HDF5) sees EINTR
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

/// A progress bar on a terminal (one line redrawn), plain lines every 10%
/// otherwise, or nothing; `header` comes first, once the first batch is done
/// (so that a run refused at the start prints one line only).
class Progress {
 public:
  Progress(const std::string& mode, std::string header, const char* unit)
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
    const double eta =
        done > base_ ? secs * static_cast<double>(total - done) / static_cast<double>(done - base_)
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

/// What a run generates, once its options are valid: the header's grid text,
/// the files, and the run itself.
struct Job {
  std::string grid;  // "16x16" / "16x16x16" ("... (stored 8x8)")
  std::vector<std::string> paths;
  std::function<GenSummary(const GenHooks&)> run;
  const char* unit = "samples";  // what the progress counts
  int64_t units_per_sample = 1;
};

std::string grid_text(int64_t r, int dims) {
  std::string text = std::to_string(r);
  for (int i = 1; i < dims; ++i) text += "x" + std::to_string(r);
  return text;
}

/// The options every problem has, from the request.
template <typename Options>
Options with_common(Options o, const DatagenRequest& q) {
  o.resolution(q.resolution)
      .samples(q.samples)
      .seed(q.seed)
      .test_samples(q.test_samples)
      .subsample(q.subsample)
      .batch_size(q.batch_size)
      .device(q.device)
      .out(q.out)
      .command_line(q.command_line);
  return o;
}

/// The job of the request's problem; throws c10::ValueError for bad options.
Job make_job(const DatagenRequest& q) {
  Job job;
  const int64_t r = q.resolution, k = q.subsample;
  if (q.problem == "darcy") {
    const DarcyGenOptions o = with_common(q.darcy, q);
    validate_darcy_options(o);
    job.grid = grid_text(r, 2);
    if (k > 1) job.grid += " (stored " + grid_text((r - 1) / k + 1, 2) + ")";
    if (o.inputs_only()) {
      job.grid += ", coefficients only";
      job.unit = "rows";
      job.units_per_sample = (r - 1) / k + 1;
    }
    job.paths = darcy_output_paths(o);
    job.run = [o](const GenHooks& h) { return generate_darcy(o, h); };
  } else if (q.problem == "poisson3d") {
    const Poisson3dGenOptions o = with_common(q.poisson3d, q);
    validate_poisson3d_options(o);
    job.grid = grid_text(r, 3);
    if (k > 1) job.grid += " (stored " + grid_text(r / k, 3) + ")";
    job.paths = poisson3d_output_paths(o);
    job.run = [o](const GenHooks& h) { return generate_poisson3d(o, h); };
  } else if (q.problem == "ns") {
    const NavierStokesGenOptions o = with_common(q.ns, q);
    validate_navier_stokes_options(o);
    job.grid = grid_text(r, 2);
    if (k > 1) job.grid += " (stored " + grid_text(r / k, 2) + ")";
    const auto records = ns_schedule(o).second;
    job.grid += ", " + std::to_string(records) + " records";
    job.paths = navier_stokes_output_paths(o);
    job.run = [o](const GenHooks& h) { return generate_navier_stokes(o, h); };
    job.unit = "records";
    job.units_per_sample = records;
  } else {
    TORCH_CHECK_VALUE(false, "problem '", q.problem, "' is not one of darcy, poisson3d, ns");
  }
  return job;
}

/// The summary on stdout.
void print_summary(const GenSummary& summary, const DatagenRequest& q) {
  if (!summary.written) {
    std::printf(
        "worker %d/%d: its batches are kept; %lld of %lld samples kept in %s; the "
        "same command without --worker writes the output once all workers are done\n",
        q.worker, q.workers, static_cast<long long>(summary.kept),
        static_cast<long long>(summary.samples), datagen_partial_dir(q.out).c_str());
    std::printf("device %s\n", summary.device.c_str());
    std::printf("seconds %.2f\n", summary.seconds);
    return;
  }
  std::printf("device %s\n", summary.device.c_str());
  std::printf("samples %lld\n", static_cast<long long>(summary.samples));
  std::printf("seconds %.2f\n", summary.seconds);
  for (const auto& line : summary.report) std::printf("%s\n", line.c_str());
  for (const auto& f : summary.files) std::printf("wrote %s\n", f.c_str());
}

}  // namespace

std::string datagen_command_line(int argc, const char* const* argv) {
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

DatagenOutcome run_datagen(const DatagenRequest& q) {
#ifdef __GLIBC__
  // The solvers' FFTs allocate and free buffers of a few hundred KiB every
  // step on the CPU; glibc's adaptive thresholds can hand them back to the
  // system and fault them in again each time. Fixed thresholds keep them.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  Job job;
  try {
    job = make_job(q);
  } catch (const c10::Error& e) {
    return {2, e.what_without_backtrace()};
  }
  // "12 samples at 16x16 (stored 8x8), seed 0 -> FILES"
  std::string header = std::to_string(q.samples) + " samples at " + job.grid + ", seed " +
                       std::to_string(q.seed) + " ->";
  for (const auto& p : job.paths) header += " " + p;
  Progress bar(q.progress, header, job.unit);
  const StopSignals signals;
  GenHooks hooks;
  hooks.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
  hooks.stop_requested = [] { return static_cast<int>(g_stop_signal); };
  hooks.resume = q.resume;
  hooks.stop_after_samples = q.stop_after_samples;
  hooks.worker = q.worker;
  hooks.workers = q.workers;
  hooks.resumed = [&](int64_t kept, int64_t total) {
    const std::string dir = datagen_partial_dir(q.out);
    bar.resumed(kept * job.units_per_sample,
                kept == 0 ? "resumable: finished batches go to '" + dir + "'"
                          : "resuming: " + std::to_string(kept) + " of " + std::to_string(total) +
                                " samples kept in '" + dir + "'");
  };
  try {
    const GenSummary summary = job.run(hooks);
    if (!summary.written) bar.abandon();
    print_summary(summary, q);
    return {};
  } catch (const DatagenInterrupted& e) {
    bar.abandon();
    return {e.signal() == 0 ? 4 : 128 + e.signal(), e.what()};
  } catch (const NsBlowUp& e) {
    bar.abandon();
    return {3, e.what()};
  } catch (const c10::ValueError& e) {
    bar.abandon();
    return {2, e.what_without_backtrace()};
  } catch (const c10::Error& e) {
    bar.abandon();
    return {3, e.what_without_backtrace()};
  } catch (const std::exception& e) {
    bar.abandon();
    return {3, e.what()};
  }
}

}  // namespace fno::data
