// 2D Navier-Stokes data as in the FNO paper (Li et al. 2020, section 5.3 and
// appendix A.3.3; fno_datagen --problem ns): the incompressible flow on the
// unit torus in vorticity form,
//   dw/dt + u . grad(w) = nu Laplace(w) + f,   u = (d psi/dy, -d psi/dx),
//   -Laplace(psi) = w,                          w(0) = w0,
// on [0,1)^2, periodic, with the paper's forcing
//   f(x, y) = 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))
// and w0 a Gaussian random field of covariance 7^(3/2) (-Laplace + 49)^(-2.5).
//
// The scheme is the paper's (its data-generation script, ns_2d.py):
// pseudo-spectral, the stream function and the derivatives in Fourier space,
// the advection term u . grad(w) formed on the grid and its spectrum cut by
// the 2/3 rule, then per step
//   w_hat <- ((1 - dt nu |k|^2 / 2) w_hat - dt F_hat + dt f_hat) / (1 + dt nu |k|^2 / 2)
// (|k|^2 meaning 4 pi^2 |k|^2): Crank-Nicolson for the diffusion, explicit
// Euler for the advection and the forcing. It runs on the real half spectrum
// (rfft2), in float64 by default or in float32 (the paper's precision);
// derivatives drop the Nyquist modes, whose sign is ambiguous (the paper's
// full spectrum keeps them at k = -R/2; the fields there are ~1e-10 of the
// whole, and the 2/3 rule removes them from F).
//
// A step makes few passes over memory (ns_solve): one broadcast multiply of
// w_hat by a precomputed [5, R, R/2+1] table gives the spectra of u, v, dw/dx,
// dw/dy (with the inverse transform's 1/R^2) and the Crank-Nicolson term
// keep w_hat at once; one inverse FFT of the four; two fused multiply-adds
// form u . grad(w) - f on the grid (the forcing rides in the advection's
// transform); one forward FFT; one fused multiply-add updates w_hat in place.
// On CUDA the step is fused (NsSolveOptions::fused): three kernels and two
// direct cuFFT calls on the same tables, rounded as LibTorch's kernels round,
// whose inverse transform overwrites its input instead of LibTorch's copy of
// it; and the steps are replayed from a CUDA graph of a chunk of steps. The
// finite check runs once per record: a non-finite entry of w_hat stays
// non-finite at every later step (keep w_hat + ... keeps it), so a record that
// ends finite had every step finite, and one that does not is solved again
// from its start, step by step, to name the first non-finite step exactly.
//
// Grid and layout: x_i = i / R, y_j = j / R; fields [B, i, j] = (sample, x_i, y_j).
// Records: record r (r = 0 .. T-1) is the field at time (r + 1) * record_every.
#pragma once

#include <fno_data/generator.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno::data {

/// The paper's initial vorticity for sample `index` under `seed`: the GRF of
/// covariance sigma^2 (-Laplace + tau^2)^(-alpha) with sigma = tau^(alpha - 1)
/// (the paper's GaussianRF(2, R, alpha, tau)): Re of the inverse FFT of
/// sqrt(2) sigma (4 pi^2 |k|^2 + tau^2)^(-alpha/2) (z1 + i z2)_k over the
/// grid's FFT frequencies k, zero at k = 0, with z1, z2 standard normal numbers
/// from a generator seeded by (seed, index) alone (2 R^2 of them, row-major,
/// z1 and z2 of a frequency together), so they do not depend on the batch, the
/// device or LibTorch's RNG.
// -> [R, R] float64, CPU
torch::Tensor ns_initial_vorticity(uint64_t seed, int64_t index, int64_t resolution,
                                   double alpha = 2.5, double tau = 7.0);

/// The paper's forcing 0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y))) on the grid.
// -> [R, R] float64 on `options`' device
torch::Tensor ns_paper_forcing(int64_t resolution, const torch::TensorOptions& options);

/// A run that stopped because the vorticity stopped being finite.
class NsBlowUp : public std::runtime_error {
 public:
  NsBlowUp(int64_t step, const std::string& what) : std::runtime_error(what), step_(step) {}
  /// The time step (1-based) after which the field was not finite.
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

/// How ns_solve runs (the equation and the schedule are its arguments).
struct NsSolveOptions {
  /// The solve's real type: torch::kDouble (default) or torch::kFloat (the
  /// paper's ns_2d.py; half the bytes a step moves). Spectra are complex of it.
  TORCH_ARG(torch::Dtype, precision) = torch::kDouble;
  /// On CUDA, replay the steps from CUDA graphs (false: launch every kernel
  /// of every step). The numbers are the same either way.
  TORCH_ARG(bool, cuda_graph) = true;
  /// Steps per CUDA graph (0: min(steps_per_record, 100)); the remainder of
  /// each record runs without the graph.
  TORCH_ARG(int64_t, graph_steps) = 0;
  /// Keep every k-th grid point per side in the records (k divides R).
  TORCH_ARG(int64_t, subsample) = 1;
  /// On CUDA, the fused step (data/src/cuda/ns_step.cu: the same products and
  /// sums, cuFFT called directly) where ns_fused_step_available(); false: the
  /// LibTorch step. The numbers differ by cuFFT's plans' rounding at most.
  TORCH_ARG(bool, fused) = true;
};

/// Whether the fused CUDA step is compiled in (a CUDA LibTorch and nvcc) and
/// not turned off by the environment (FNO_NS_FUSED=0, read once).
bool ns_fused_step_available();

/// Solves from w0 [B, R, R] (any float type, any device; computed in
/// options.precision there) for `records` x `steps_per_record` steps of `dt`,
/// with forcing f ([R, R], or undefined for none), and returns the records
/// [B, R/k, R/k, records] in options.precision (k = options.subsample).
/// `on_record(r)` is called after record r is made (progress, interruption:
/// it may throw). Throws NsBlowUp naming the first step after which the field
/// is not finite.
torch::Tensor ns_solve(const torch::Tensor& w0, const torch::Tensor& f, double viscosity, double dt,
                       int64_t steps_per_record, int64_t records, const NsSolveOptions& options,
                       const std::function<void(int64_t)>& on_record = {});

/// ns_solve in float64 with the default options.
torch::Tensor ns_solve(const torch::Tensor& w0, const torch::Tensor& f, double viscosity,
                       double dt, int64_t steps_per_record, int64_t records,
                       const std::function<void(int64_t)>& on_record = {});

/// Bytes of device memory one sample of a solve takes (state, the step's
/// buffers and transforms' temporaries, the records), for the automatic batch.
int64_t ns_bytes_per_sample(int64_t resolution, int64_t subsample, int64_t records,
                            torch::Dtype precision);

/// The automatic CUDA batch: as many samples as fit in `free_bytes` (with a
/// margin) at ns_bytes_per_sample each, rounded down to a power of two, at
/// most kNsMaxAutoBatch and `samples`, at least 1.
int64_t ns_auto_batch(int64_t resolution, int64_t subsample, int64_t records,
                      torch::Dtype precision, int64_t samples, int64_t free_bytes);
/// The automatic batch's cap: 256 samples at 256^2 give kernels of 2^24 points
/// a field, many times a GPU's threads, and keep a batch short enough that
/// --resume loses little when a run is stopped.
constexpr int64_t kNsMaxAutoBatch = 256;

struct NavierStokesGenOptions : GeneratorOptions<NavierStokesGenOptions> {
  /// resolution: grid points per side of the solve (x_i = i / R), 8 to 4096,
  /// even. samples: sample i depends only on (seed, i), or on the initial
  /// file's sample i. subsample: k must divide resolution (the paper: 256 ->
  /// 64, k = 4). batch_size: 0 is 1 on the CPU, on CUDA ns_auto_batch of the
  /// device's free memory; on the CPU every sample is solved alone, so the
  /// data do not depend on it; on CUDA cuFFT's batched plans may round
  /// differently for another batch size.
  NavierStokesGenOptions() : GeneratorOptions(256) {}
  /// Kinematic viscosity nu (> 0; the paper: 1e-3, 1e-4, 1e-5).
  TORCH_ARG(double, viscosity) = 1e-3;
  /// Time step (the paper: 1e-4).
  TORCH_ARG(double, dt) = 1e-4;
  /// Final time T: records at record_every, 2 record_every, ..., T.
  TORCH_ARG(double, t_final) = 50.0;
  /// Time between records; a whole number of steps, and T a whole number of records.
  TORCH_ARG(double, record_every) = 1.0;
  /// "paper" (0.1 (sin 2 pi (x+y) + cos 2 pi (x+y))) or "none".
  TORCH_ARG(std::string, forcing) = "paper";
  /// An HDF5 file whose dataset `w0` (N, R, R), N >= samples, gives the
  /// initial fields instead of the GRF ("": the GRF).
  TORCH_ARG(std::string, initial) = "";
  /// The initial GRF's exponent and inverse length scale.
  TORCH_ARG(double, alpha) = 2.5;
  TORCH_ARG(double, tau) = 7.0;
  /// "float64" (default) or "float32": the solve's precision (NsSolveOptions);
  /// a resume setting, and the files' `precision` attribute.
  TORCH_ARG(std::string, precision) = "float64";
  /// On CUDA, replay the steps from CUDA graphs (the same numbers; false for timing).
  TORCH_ARG(bool, cuda_graph) = true;
};

/// Checks the options (and the initial file's shape, when given); throws
/// c10::ValueError naming the option (or the file) and its value.
void validate_navier_stokes_options(const NavierStokesGenOptions& options);

/// Steps per record and records of valid options: {record_every / dt, t_final / record_every}.
std::pair<int64_t, int64_t> ns_schedule(const NavierStokesGenOptions& options);

/// The files a run writes: {out}, or {STEM_train.EXT, STEM_test.EXT} with a test split.
std::vector<std::string> navier_stokes_output_paths(const NavierStokesGenOptions& options);

/// Generates the samples batch by batch into HDF5 files: `a` (N, R', R'), the
/// initial vorticity, and `u` (N, R', R', T), the records, float32, R' =
/// resolution / subsample, with the settings as root attributes (record r is
/// at time (r + 1) record_every). Atomic, interruptible and with the errors of
/// generate_darcy; NsBlowUp (no file written) when the vorticity is not
/// finite. hooks.progress counts records of samples: (done, samples x T). The
/// summary's max_abs is the largest |w| stored.
GenSummary generate_navier_stokes(const NavierStokesGenOptions& options,
                                  const GenHooks& hooks = {});

}  // namespace fno::data
