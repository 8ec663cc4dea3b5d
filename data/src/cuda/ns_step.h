// One pseudo-spectral Navier-Stokes step on CUDA (navier_stokes_gen.cpp's
// NsStepper; fno_data/navier_stokes_gen.h), float32 or float64, on w_hat
// [B, R, R/2+1] with the stepper's tables: three kernels and two cuFFT calls
// instead of LibTorch's mul, irfft2 (which copies its four input spectra,
// since the complex-to-real transform overwrites them), two addcmul, rfft2
// and addcmul:
//   1. spectra[q] = coef[q] w_hat, q = 0..3 (u, v, dw/dx, dw/dy over R^2);
//   2. fields = C2R(spectra) (4B transforms; the spectra are overwritten:
//      step 1 writes them again next step);
//   3. advection = (minus_f + u wx) + v wy (without forcing: u wx + v wy);
//   4. advection_hat = R2C(advection) (B transforms);
//   5. w_hat = coef[4] w_hat + minus_dt_gain advection_hat.
// Each product and sum is rounded as LibTorch's kernels round it (no fused
// multiply-adds), so the step differs from the LibTorch step only by cuFFT's
// plans. Torch-free: raw device pointers and a cudaStream_t; the caller
// checks the returned status (internal to fno_data).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fno::data::cuda {

/// A call's outcome: code 0 on success, else the cufftResult or cudaError_t
/// of the call named by `call`.
struct NsStatus {
  int code = 0;
  const char* call = "";
  bool ok() const { return code == 0; }
};

/// The cuFFT plans of one stepper (cufftHandle values; -1: none): C2R of 4B
/// spectra, R2C of B fields, R x R, without their own work areas.
struct NsFftPlans {
  int c2r = -1, r2c = -1;
  /// The device they were made on (destroy makes it current for the call).
  int device = -1;
  /// The bytes of the work area the two share (they run one after the other).
  size_t work_bytes = 0;
};

/// Makes the plans for `batch` samples of R x R (Z2D/D2Z when f64) on the
/// current device, with automatic allocation off. On failure the plans made
/// are destroyed.
NsStatus ns_fft_plans_create(NsFftPlans* plans, int64_t batch, int64_t r, bool f64);
/// Gives both plans the work area `work` (at least plans.work_bytes, device memory).
NsStatus ns_fft_plans_set_work_area(const NsFftPlans& plans, void* work);
/// Destroys the plans (no-op for -1) on their device and sets them to -1;
/// the current device stays. Does not throw.
void ns_fft_plans_destroy(NsFftPlans* plans);

/// The step's buffers and tables: contiguous device memory of the stepper's
/// type T (float or double; complex: interleaved pairs).
struct NsStepArgs {
  void* w_hat;                // [B, R, R/2+1] complex, in and out
  void* spectra;              // [4, B, R, R/2+1] complex, scratch
  void* fields;               // [4, B, R, R] real, scratch (16-byte aligned)
  void* advection;            // [B, R, R] real, scratch (16-byte aligned)
  void* advection_hat;        // [B, R, R/2+1] complex, scratch
  const void* coef;           // [5, R, R/2+1] complex: u, v, dw/dx, dw/dy factors, keep
  const void* minus_dt_gain;  // [R, R/2+1] complex
  const void* minus_f;        // [R, R] real (16-byte aligned), or null: no forcing
  int64_t batch = 0, r = 0;
  bool f64 = false;
};

/// One step on `stream` (a cudaStream_t; capturable into a CUDA graph): sets
/// the plans' stream, launches the kernels and executes the transforms.
NsStatus ns_step(const NsFftPlans& plans, const NsStepArgs& args, void* stream);

}  // namespace fno::data::cuda
