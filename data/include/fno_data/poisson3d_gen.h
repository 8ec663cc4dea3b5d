// A 3D problem for 3D FNOs (fno_datagen --problem poisson3d): Poisson's
// equation on the periodic unit cube,
//   -Laplace(u) = f on [0,1)^3, periodic, u and f with zero mean,
// with f a zero-mean Gaussian random field of covariance
//   tau^(2 alpha - 3) (-Laplace + tau^2)^(-alpha),  alpha = 2.5, tau = 3 by default
// (the d = 3 form of the Darcy GRF's scale tau^(2 alpha - d) in GRF.m; with the
// periodic Laplacian, eigenvalues 4 pi^2 |k|^2 on the Fourier modes
// exp(2 pi i k.x)), and u its exact spectral solution,
//   u_hat(k) = f_hat(k) / (4 pi^2 |k|^2),  u_hat(0) = 0.
//
// Everything lives on the R x R x R grid x_i = i / R (periodic, so x = 1 is x = 0).
// f is made from white noise w at the grid points, standard normal numbers drawn
// from a generator seeded by (seed, sample) alone: f = sum_k sqrt(mu_k) zeta_k
// exp(2 pi i k.x) over the grid's FFT frequencies k (components in
// [-R/2, (R-1)/2]), zeta the orthonormal FFT of w (so the zeta_k are
// independent standard complex normals, conjugate-symmetric), sqrt(mu_k) =
// tau^(alpha-3/2) (4 pi^2 |k|^2 + tau^2)^(-alpha/2), mu_0 = 0. The field's
// covariance is C(lag) = sum_k mu_k exp(2 pi i k.lag / R): with the defaults a
// variance of 0.0066 (standard deviation 0.082) and a correlation that falls to
// 1/e at a lag of about 0.26 along an axis (R = 32 or more); u's standard
// deviation is about 0.0015. Everything is float64; the files hold float32.
//
// Array layout: [B, i, j, l] = sample, x_i, y_j, z_l.
#pragma once

#include <fno_data/generator.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fno::data {

/// White noise [R, R, R] (float64, CPU) of sample `index` under `seed`: standard
/// normal numbers in C order, from a generator seeded by (seed, index) alone (as
/// grf_noise's), so they do not depend on the batch, the device or LibTorch's RNG.
torch::Tensor white_noise3d(uint64_t seed, int64_t index, int64_t resolution);

/// sqrt(mu_k) on the real-FFT half grid: tau^(alpha-3/2) (4 pi^2 |k|^2 +
/// tau^2)^(-alpha/2), 0 at k = 0.
// -> [R1, R2, R3 / 2 + 1] float64 on `options`' device
torch::Tensor periodic_grf3d_spectrum(torch::IntArrayRef grid, double alpha, double tau,
                                      const torch::TensorOptions& options);

/// The periodic GRF f from white noise w (see above).
// w: [B, R1, R2, R3] -> f: [B, R1, R2, R3] float64, on w's device
torch::Tensor periodic_grf3d(const torch::Tensor& w, double alpha, double tau);

/// -Laplace(u) on the periodic unit cube, spectrally (by FFT): the k-th Fourier
/// coefficient times 4 pi^2 |k|^2.
// u: [B, R1, R2, R3] -> [B, R1, R2, R3] float64
torch::Tensor periodic_neg_laplacian(const torch::Tensor& u);

/// The zero-mean solution of -Laplace(u) = f on the periodic unit cube, spectrally
/// (f's mean, which has no solution, is dropped).
// f: [B, R1, R2, R3] -> u: [B, R1, R2, R3] float64
torch::Tensor periodic_poisson_solve(const torch::Tensor& f);

struct Poisson3dGenOptions : GeneratorOptions<Poisson3dGenOptions> {
  /// resolution: grid points per side (x_i = i / R), 4 to 1024. subsample: k
  /// must divide resolution. batch_size: 0 is 1 on the CPU, 2^24 / R^3 within
  /// [1, 32] on CUDA; on the CPU every sample is transformed alone, so the
  /// data do not depend on it; on CUDA cuFFT's batching is not ours.
  Poisson3dGenOptions() : GeneratorOptions(32) {}
  /// GRF exponent: covariance tau^(2 alpha - 3) (-Laplace + tau^2)^(-alpha).
  TORCH_ARG(double, alpha) = 2.5;
  /// GRF inverse length scale.
  TORCH_ARG(double, tau) = 3.0;
};

/// Checks the options; throws c10::ValueError naming the option and its value.
void validate_poisson3d_options(const Poisson3dGenOptions& options);

/// The files a run writes: {out}, or {STEM_train.EXT, STEM_test.EXT} with a test split.
std::vector<std::string> poisson3d_output_paths(const Poisson3dGenOptions& options);

/// Generates the samples batch by batch and writes HDF5 files that load_darcy
/// reads directly: `coeff` = f and `sol` = u, float32 (N, R', R', R'), R' =
/// resolution / subsample, one chunk per sample (split when over 1 MiB),
/// shuffle + deflate, with the settings as root attributes; max_residual is
/// ||f + Laplace(u)|| / ||f|| of the float64 fields, Laplace by FFT. Atomic,
/// interruptible and with the errors of generate_darcy; the summary's CG fields
/// are 0.
GenSummary generate_poisson3d(const Poisson3dGenOptions& options, const GenHooks& hooks = {});

}  // namespace fno::data
