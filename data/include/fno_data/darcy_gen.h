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

#include <fno_data/generator.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
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
// The coefficient field row band by row band (fno_datagen --inputs-only)
// ---------------------------------------------------------------------------

/// The GRF's KL coefficients of sample `index` with the modes max(k1, k2) < K
/// kept: c_k = sqrt(lambda_k) xi_k (grf_from_noise's weights, the mean mode
/// zero), xi_k the first K shells of grf_noise(seed, index, R) for any R >= K
/// (the shells come first, so they are the same numbers).
// -> c: [K, K] float64, CPU
torch::Tensor grf_coefficients(uint64_t seed, int64_t index, int64_t modes, double alpha,
                               double tau);

/// Rows of the GRF g(x_i, y_j) = sum_(k1, k2 < K) c_k phi_k1(x_i) phi_k2(y_j)
/// on the R x R node grid from its kept coefficients c [K, K] (K <= R), a
/// band of rows at a time, so that no R x R array is ever held: the sum over
/// k1 is made once for every row, U [R, K] (kept as U^T [K, R], R K doubles),
/// and each band's sum over k2 is a DCT-I of length R by a real inverse FFT,
/// as grf_from_noise's. With K = R it is grf_from_noise's field up to
/// rounding (the two sums in the other order).
class GrfRows {
 public:
  /// c: [K, K] float64 (CPU or any device); the work runs on `device`.
  GrfRows(const torch::Tensor& c, int64_t resolution, const torch::Device& device);
  /// Rows i = first, first + step, ..., `count` of them, at every step-th
  /// column j = 0, step, ...: [count, (R - 1) / step + 1] float64 on the device.
  torch::Tensor rows(int64_t first, int64_t count, int64_t step = 1) const;
  int64_t resolution() const { return resolution_; }
  int64_t modes() const { return modes_; }

 private:
  torch::Tensor ut_;  // [K, R] float64: U^T
  int64_t resolution_ = 0;
  int64_t modes_ = 0;
};

// ---------------------------------------------------------------------------
// The generator (apps/fno_datagen)
// ---------------------------------------------------------------------------

struct DarcyGenOptions : GeneratorOptions<DarcyGenOptions> {
  /// resolution: nodes per side of the solve grid, boundary nodes included
  /// (>= 3; at most 16385, or 65537 with inputs_only). subsample: k must
  /// divide resolution - 1 (the boundary kept). batch_size: 0 is 1 on the
  /// CPU, 32 on CUDA; memory and speed only: every sample's arithmetic is its
  /// own (tests check the bytes on the CPU; on CUDA a test does where CUDA is,
  /// as cuFFT's batching is not ours).
  DarcyGenOptions() : GeneratorOptions(421) {}
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
  /// The coefficient alone, without the solve: one dataset `coeff`, float32
  /// (N, R', R'), chunked by rows and not compressed, written row band by row
  /// band from GrfRows (never a whole field in memory), and a root attribute
  /// `solution` saying that none was computed. Not resumable.
  TORCH_ARG(bool, inputs_only) = false;
  /// With inputs_only: the GRF's modes kept per dim, max(k1, k2) < K (0:
  /// automatic, min(R, kDarcyAutoModes)). With every mode (K = R) the field
  /// is the solved run's (same seed, same bytes of coeff but for rounding at
  /// |g| ~ 1e-16); with fewer, the same field less its finest modes.
  TORCH_ARG(int64_t, grf_modes) = 0;
};

/// The automatic grf_modes: every mode of any grid the solve takes (16385
/// nodes per side), so that up to there inputs_only draws the solved run's
/// field; above, the 16385^2 lowest modes (the others carry about 5e-9 of
/// its variance: see docs/data.md).
constexpr int64_t kDarcyAutoModes = 16385;

/// Checks the options; throws c10::ValueError naming the option and its value.
void validate_darcy_options(const DarcyGenOptions& options);

/// The files a run writes: {out}, or {STEM_train.EXT, STEM_test.EXT} with a test split.
std::vector<std::string> darcy_output_paths(const DarcyGenOptions& options);

/// Generates the samples batch by batch and writes them as HDF5 files that
/// load_darcy reads directly: `coeff` and `sol`, float32 (N, R', R'),
/// R' = (resolution - 1) / subsample + 1, one chunk per sample, shuffle +
/// deflate, with the generator's settings as root attributes (inputs_only:
/// `coeff` alone, see there). The files appear atomically at the end
/// (temporary file, fsync, rename). Throws c10::ValueError for bad options,
/// DatagenInterrupted when stopped, std::runtime_error or c10::Error
/// otherwise; no output file is left behind in any of these cases.
GenSummary generate_darcy(const DarcyGenOptions& options, const GenHooks& hooks = {});

}  // namespace fno::data
