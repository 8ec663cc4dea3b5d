// Darcy-flow data generation as in the FNO paper (Li et al. 2020, appendix
// A.3.2): -div(a grad u) = f on the unit square, u = 0 on the boundary, f = 1,
// a = 12 where a Gaussian random field g >= 0 and 3 where g < 0; g has the
// covariance tau^(2 alpha - 2) (-Laplacian + tau^2)^(-alpha), alpha = 2, tau = 3,
// with the zero-Neumann Laplacian (a cosine basis), as GRF.m of the paper's
// data scripts.
//
// Everything lives on the R x R node grid x_i = i h, h = 1 / (R - 1), boundary
// nodes included: g and a are evaluated at the nodes, u is zero on the
// boundary nodes and the (R - 2)^2 interior values solve the 5-point
// finite-difference system with arithmetic face averages of a (solve_gwf.m's
// scheme). The solver is matrix-free preconditioned CG in float64, batched
// over samples, on the CPU or on CUDA through LibTorch; the preconditioner is
// the exact inverse of the constant-coefficient Laplacian by DST-I (FFTs), so
// for a in [3, 12] the preconditioned condition number is at most 4 and CG
// needs about 25 iterations at any resolution.
//
// Array layout: [B, i, j] = sample, x_i, y_j.
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno::data {

// ---------------------------------------------------------------------------
// The random coefficient
// ---------------------------------------------------------------------------

/// Standard normal KL coefficients xi [R, R] (float64, CPU) of sample `index`
/// under `seed`, from a generator seeded by (seed, index) alone (mt19937_64 and
/// Box-Muller, so the numbers do not depend on LibTorch's RNG or on how samples
/// are batched). They are drawn shell by shell, max(k1, k2) = 0, 1, ..., so a
/// field at a lower resolution shares its modes with the same sample at a
/// higher one.
torch::Tensor grf_noise(uint64_t seed, int64_t index, int64_t resolution);

/// The GRF at the nodes x_i = i / (R - 1) from its KL coefficients:
///   g(x, y) = sum_{k != 0} sqrt(lambda_k) xi_k phi_k1(x) phi_k2(y),  k in [0, R-1]^2,
/// phi_0 = 1, phi_k = sqrt(2) cos(pi k x) (orthonormal zero-Neumann
/// eigenfunctions), sqrt(lambda_k) = tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2)
/// and the mean mode dropped, as GRF.m (whose orthonormal idct2 is this sum at
/// cell centres). Evaluated by DCT-I through torch::fft.
// xi: [B, R, R] float64 -> g: [B, R, R] float64, on xi's device
torch::Tensor grf_from_noise(const torch::Tensor& xi, double alpha, double tau);

/// The sign of a field mapped to two values: `high` where g >= 0, `low` elsewhere.
// g: [*] -> [*] float64
torch::Tensor threshold_coefficient(const torch::Tensor& g, double high, double low);

// ---------------------------------------------------------------------------
// The finite-difference problem
// ---------------------------------------------------------------------------

/// The Darcy operator on the interior nodes, with u = 0 on the boundary:
///   (A u)_ij = h^-2 sum over the 4 neighbours n of a_{ij,n} (u_ij - u_n),
/// a_{ij,n} = (a_ij + a_n) / 2 (arithmetic face averages, as solve_gwf.m).
// a: [B, R, R], u: [B, R, R] (its boundary values are ignored) -> [B, R-2, R-2] float64
torch::Tensor darcy_operator(const torch::Tensor& a, const torch::Tensor& u);

/// The exact solution of -Laplace_h u = f with u = 0 outside the n x n interior
/// block, h = 1 / (n + 1) (5-point Laplacian), by DST-I along both dims.
// f: [B, n, n] float64 -> u: [B, n, n] float64
torch::Tensor poisson_solve(const torch::Tensor& f);

struct DarcySolveOptions {
  /// CG stops for a sample once ||r||_2 <= tolerance * ||f||_2 (interior nodes), r the
  /// residual CG updates by recurrence. The true residual (darcy_residual) follows it
  /// down to round-off, about 1e-11 relative at R = 421: a smaller tolerance costs
  /// iterations without making it smaller.
  TORCH_ARG(double, tolerance) = 1e-10;
  /// Iteration limit; reaching it with a sample unconverged is an error.
  TORCH_ARG(int64_t, max_iterations) = 1000;
};

struct DarcySolution {
  torch::Tensor u;           // [B, R, R] float64 on a's device, zero on the boundary
  torch::Tensor iterations;  // [B] int64, CPU: CG iterations per sample
  torch::Tensor residual;    // [B] float64, CPU: CG's recurrence residual at its stop, relative
};

/// Solves A u = f (darcy_operator) by preconditioned CG, all samples together
/// but each with its own step sizes and stopping test: a sample stops changing
/// once converged, so its result does not depend on the others in the batch.
// a: [B, R, R] > 0, f: [B, R, R] (interior values used), same device
DarcySolution solve_darcy(const torch::Tensor& a, const torch::Tensor& f,
                          const DarcySolveOptions& options = {});

/// ||f - A u||_2 / ||f||_2 over the interior nodes, per sample (0 where f = 0).
// a, u, f: [B, R, R] -> [B] float64, CPU
torch::Tensor darcy_residual(const torch::Tensor& a, const torch::Tensor& u,
                             const torch::Tensor& f);

// ---------------------------------------------------------------------------
// The generator (apps/fno_datagen)
// ---------------------------------------------------------------------------

struct DarcyGenOptions {
  /// Nodes per side of the solve grid, boundary nodes included (>= 3).
  TORCH_ARG(int64_t, resolution) = 421;
  /// Samples in all (1 to 10^9); sample i depends only on (seed, i).
  TORCH_ARG(int64_t, samples) = 1;
  /// Seed of the random fields.
  TORCH_ARG(uint64_t, seed) = 0;
  /// The last test_samples samples go to a separate test file (0: one file).
  TORCH_ARG(int64_t, test_samples) = 0;
  /// Store every k-th node per side; k must divide resolution - 1 (boundary kept).
  TORCH_ARG(int64_t, subsample) = 1;
  /// GRF exponent: covariance tau^(2 alpha - 2) (-Laplacian + tau^2)^(-alpha).
  TORCH_ARG(double, alpha) = 2.0;
  /// GRF inverse length scale.
  TORCH_ARG(double, tau) = 3.0;
  /// Coefficient where the GRF is >= 0.
  TORCH_ARG(double, value_high) = 12.0;
  /// Coefficient where the GRF is < 0.
  TORCH_ARG(double, value_low) = 3.0;
  /// The constant right-hand side f.
  TORCH_ARG(double, forcing) = 1.0;
  /// Relative residual at which CG stops, per sample.
  TORCH_ARG(double, tolerance) = 1e-10;
  /// CG iteration limit (an error when reached).
  TORCH_ARG(int64_t, max_iterations) = 1000;
  /// Samples solved together, 0: 1 on the CPU, 32 on CUDA. Memory and speed
  /// only: every sample's arithmetic is its own (tests check the bytes on the
  /// CPU; on CUDA a test does where CUDA is, as cuFFT's batching is not ours).
  TORCH_ARG(int64_t, batch_size) = 0;
  /// "cpu", "cuda", "cuda:N" or "auto" (CUDA when available).
  TORCH_ARG(std::string, device) = "auto";
  /// Output file (.h5); with test_samples > 0, STEM_train.EXT and STEM_test.EXT instead.
  TORCH_ARG(std::string, out) = "";
  /// Stored in the files' command_line attribute.
  TORCH_ARG(std::string, command_line) = "";
};

struct DarcyGenHooks {
  /// Called after each batch with the samples done and the total.
  std::function<void(int64_t done, int64_t total)> progress;
  /// Polled before each batch; a non-zero answer (a signal number) stops the
  /// run with DatagenInterrupted, leaving no output file.
  std::function<int()> stop_requested;
  /// Resumable (fno_datagen --resume): each finished batch is kept as its own
  /// file (written atomically) in the directory datagen_partial_dir(out), and
  /// a run finds the samples kept there by an earlier one, checks that they
  /// were made with the same settings and goes on after them; at the end the
  /// output files are made from the kept samples (the same bytes as a run
  /// without resume) and the directory is removed. A stop leaves the kept
  /// samples. Refused (c10::ValueError): other settings, or no directory while
  /// an output file exists; a directory that holds anything else or damaged
  /// files: std::runtime_error.
  bool resume = false;
  /// With resume: stops with DatagenInterrupted (signal 0) before a batch
  /// once at least this many samples are kept (0: never; for tests).
  int64_t stop_after_samples = 0;
  /// With resume: called once before the first batch with the samples kept.
  std::function<void(int64_t kept, int64_t total)> resumed;
  /// With resume, worker `worker` of `workers` processes that make one run's
  /// samples together in the same directory (one per GPU, say): it makes only
  /// the run's batches j (samples [j B, (j + 1) B), B the batch size) with
  /// j % workers == worker that are not kept yet, and returns once they are,
  /// without the output files (DarcyGenSummary::written false). A run without
  /// workers then makes any batch still missing and writes the files: the
  /// same bytes as one run on CUDA with the same batch size (and on the CPU).
  int worker = 0;
  int workers = 1;
};

/// Where a resumable run keeps its finished samples: OUT.partial (a directory).
std::string datagen_partial_dir(const std::string& out);

/// The run stopped on request (SIGINT, SIGTERM; signal() 0: stop_after_samples
/// was reached): no output file was written (a resumable run keeps its samples).
class DatagenInterrupted : public std::runtime_error {
 public:
  DatagenInterrupted(int signal, const std::string& what)
      : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

struct DarcyGenSummary {
  std::vector<std::string> files;
  std::string device;
  int64_t samples = 0;
  double seconds = 0;
  double max_residual = 0;  // largest true relative residual ||f - A u|| / ||f|| (float64)
  int64_t max_iterations = 0;
  double mean_iterations = 0;
  double max_abs = 0;  // largest |value| stored (Navier-Stokes: the vorticity)
  int64_t batch = 0;   // Navier-Stokes: the samples solved together
  double solve_seconds = 0;  // Navier-Stokes: the time in the solver (device to host included)
  bool written = true;       // false: a worker's batches kept, no file written (hooks.workers)
  int64_t kept = 0;          // the samples kept in all (written false)
};

/// Checks the options; throws c10::ValueError naming the option and its value.
void validate_darcy_options(const DarcyGenOptions& options);

/// The files a run writes: {out}, or {STEM_train.EXT, STEM_test.EXT} with a test split.
std::vector<std::string> darcy_output_paths(const DarcyGenOptions& options);

/// Generates the samples batch by batch and writes them as HDF5 files that
/// load_darcy reads directly: `coeff` and `sol`, float32 (N, R', R'),
/// R' = (resolution - 1) / subsample + 1, one chunk per sample, shuffle +
/// deflate, with the generator's settings as root attributes. The files appear
/// atomically at the end (temporary file, fsync, rename). Throws c10::ValueError
/// for bad options, DatagenInterrupted when stopped, std::runtime_error or
/// c10::Error otherwise; no output file is left behind in any of these cases.
DarcyGenSummary generate_darcy(const DarcyGenOptions& options, const DarcyGenHooks& hooks = {});

}  // namespace fno::data
