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
// --problem darcy --inputs-only draws the coefficient field alone, without the
// solve, row band by row band into a dataset chunked by rows (up to 65537^2).
//
// This file parses the command line; the run lives in fno_data/datagen.h.
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
#include <fno_data/datagen.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli.h"

namespace {

const fno::cli::Fail fail("fno_datagen");

using fno::cli::non_negative_integer;

constexpr const char* kAbout =
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
    "record_every.";

/// The options every problem has.
void add_common(CLI::App& app, fno::data::DatagenRequest& q) {
  app.add_option("--problem", q.problem, "darcy (default), poisson3d or ns")
      ->check(CLI::IsMember({"darcy", "poisson3d", "ns"}));
  app.add_option("--resolution", q.resolution,
                 "grid points per side: darcy, nodes of the solve, boundary included (>= 3); "
                 "poisson3d, points of the periodic grid (>= 4); ns, points of the periodic "
                 "grid of the solve (even, >= 8; the paper: 256)")
      ->required()
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--samples", q.samples, "number of samples in all")
      ->required()
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--seed", q.seed, "seed; sample i depends only on (seed, i)")
      ->required()
      ->transform(non_negative_integer<uint64_t>());
  app.add_option("--out", q.out,
                 "output file (.h5); with --test-samples, STEM_train.h5 and STEM_test.h5")
      ->required();
  app.add_option("--test-samples", q.test_samples,
                 "put the last N samples into STEM_test.h5, the others into STEM_train.h5 "
                 "(default 0: one file)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--subsample", q.subsample,
                 "store every k-th node per side; darcy: k must divide resolution - 1 "
                 "(421 with k = 5, 3, 2 gives 85, 141, 211); poisson3d and ns: k must divide "
                 "resolution (ns, the paper: 256 with k = 4 gives 64)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--batch", q.batch_size,
                 "samples solved together (default 1 on the CPU; on CUDA 32 for darcy, "
                 "2^24 / R^3 within [1, 32] for poisson3d, for ns as many as fit in the free GPU "
                 "memory, a power of 2, at most 256 and --samples); on the CPU the data do not "
                 "depend on it")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--device", q.device, "auto (CUDA when available), cpu, cuda or cuda:N");
}

/// The options of one problem each.
void add_problem_options(CLI::App& app, fno::data::DatagenRequest& q) {
  app.add_option("--tolerance", q.darcy.tolerance(),
                 "darcy: relative residual at which CG stops (default 1e-10)");
  app.add_flag("--inputs-only", q.darcy.inputs_only(),
               "darcy: draw the coefficient a alone, without the solve: dataset coeff only, "
               "chunked by rows, written row band by row band (resolution up to 65537)");
  app.add_option("--grf-modes", q.darcy.grf_modes(),
                 "darcy --inputs-only: the random field's modes kept per dim (default: all up "
                 "to 16385, the field of the solved run of the same seed)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--viscosity", q.ns.viscosity(), "ns: the viscosity nu, > 0 (default 1e-3)");
  app.add_option("--dt", q.ns.dt(), "ns: the time step (default 1e-4)");
  app.add_option("--t-final", q.ns.t_final(),
                 "ns: the final time T, a whole number of records (default 50)");
  app.add_option("--record-every", q.ns.record_every(),
                 "ns: the time between records, a whole number of steps (default 1)");
  app.add_option("--forcing", q.ns.forcing(), "ns: paper (default) or none")
      ->check(CLI::IsMember({"paper", "none"}));
  app.add_option("--precision", q.ns.precision(),
                 "ns: the solve's precision, float64 (default) or float32 (the FNO paper's; about "
                 "half the memory traffic)")
      ->check(CLI::IsMember({"float64", "float32"}));
  app.add_flag_function(
      "--no-cuda-graph", [&q](int64_t) { q.ns.cuda_graph(false); },
      "ns: on CUDA, launch every step's kernels instead of replaying CUDA graphs (the "
      "same numbers; for timing)");
  app.add_option("--initial", q.ns.initial(),
                 "ns: an HDF5 file whose dataset w0 (N, R, R) gives the initial vorticity of "
                 "the first N >= --samples samples (default: the paper's random field)");
}

/// The options of the run itself.
void add_run_options(CLI::App& app, fno::data::DatagenRequest& q, std::string& worker) {
  app.add_flag("--resume", q.resume,
               "keep each finished batch in OUT.partial/ and go on after the samples kept "
               "there by an earlier run with the same settings; at the end write the output "
               "(the same bytes as one run) and remove OUT.partial/");
  app.add_option("--stop-after-samples", q.stop_after_samples,
                 "with --resume: stop (exit 4) once at least K samples are kept (for tests)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--worker", worker,
                 "K/N, with --resume: worker K (0 .. N-1) of N processes making one run together "
                 "in the same OUT.partial/ (one per GPU: --device cuda:K); it makes the batches "
                 "j with j % N == K and ends without the output; then the same command without "
                 "--worker writes it (the same bytes as one run)");
  app.add_option("--progress", q.progress,
                 "auto (a bar on a terminal, else lines), bar, plain, none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}));
}

/// The options given that do not apply to the problem or mode: "" when none.
std::string misplaced(const CLI::App& app, const fno::data::DatagenRequest& q) {
  if (q.problem != "darcy") {
    for (const char* flag : {"--tolerance", "--inputs-only", "--grf-modes"}) {
      if (app.count(flag) > 0) return std::string(flag) + " applies to --problem darcy only";
    }
  }
  if (q.problem != "ns") {
    for (const char* flag : {"--viscosity", "--dt", "--t-final", "--record-every", "--forcing",
                             "--initial", "--precision", "--no-cuda-graph"}) {
      if (app.count(flag) > 0) return std::string(flag) + " applies to --problem ns only";
    }
  }
  if (q.darcy.inputs_only() && app.count("--tolerance") > 0) {
    return "--tolerance applies to the solve, not to --inputs-only";
  }
  if (!q.darcy.inputs_only() && app.count("--grf-modes") > 0) {
    return "--grf-modes applies to --inputs-only only";
  }
  if (q.stop_after_samples > 0 && !q.resume) return "--stop-after-samples needs --resume";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kAbout};
  fno::data::DatagenRequest q;
  std::string worker;
  add_common(app, q);
  add_problem_options(app, q);
  add_run_options(app, q, worker);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return fno::cli::flushed(fail, app.exit(e));
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }
  if (const std::string why = misplaced(app, q); !why.empty()) return fail(2, why);
  if (!worker.empty()) {
    long long k = -1, n = 0;
    char tail = 0;
    if (std::sscanf(worker.c_str(), "%lld/%lld%c", &k, &n, &tail) != 2 || n < 1 || k < 0 ||
        k >= n || n > 1024) {
      return fail(2, "--worker " + worker + ": expected K/N with 0 <= K < N, e.g. 0/2");
    }
    if (!q.resume) return fail(2, "--worker needs --resume");
    q.worker = static_cast<int>(k);
    q.workers = static_cast<int>(n);
  }
  q.command_line = fno::data::datagen_command_line(argc, argv);
  const fno::data::DatagenOutcome result = fno::data::run_datagen(q);
  if (!result.error.empty()) return fail(result.exit_code, result.error);
  return fno::cli::flushed(fail, result.exit_code);
}
