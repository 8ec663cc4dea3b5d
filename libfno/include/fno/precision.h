// Training precision: what the layers compute in, and the loss scaler fp16 needs.
//
//   precision | activations, GEMM inputs | GEMM accumulation | weights, optimizer state
//   ----------+--------------------------+-------------------+-------------------------
//   fp32      | fp32                     | fp32 (FFMA)       | fp32
//   tf32      | fp32                     | TF32 tensor cores | fp32
//   bf16      | bf16                     | fp32, tensor cores| fp32 (complex64 spectral)
//   fp16      | fp16                     | fp32, tensor cores| fp32, with a GradScaler
//
// (fp32: the fused block tail's backward runs in 3xTF32 on tensor cores, at
// fp32's error per step; fno/fused.h says why.)
// In every precision the master weights, their gradients and AdamW's state are
// fp32 (complex64 for the spectral weights), state dicts are written in fp32,
// and losses and their reductions run in fp32: the model casts its input to the
// compute type (FNOOptions::compute_dtype) and its output back to fp32. The
// spectral transform runs as DFT GEMMs in the compute type (cuFFT has no bf16,
// and its fp16 takes powers of two only), so every grid size works; the few
// kept modes are mixed in complex64.
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fno {

enum class Precision { kFP32, kTF32, kBF16, kFP16 };

/// "fp32" | "tf32" | "bf16" | "fp16"; anything else throws std::invalid_argument naming it.
Precision parse_precision(const std::string& name);
std::string to_string(Precision precision);
/// The type activations are computed and stored in: kFloat for fp32 and tf32.
c10::ScalarType compute_dtype(Precision precision);
/// Whether training in this precision needs a loss scaler (fp16: its range is narrow).
bool needs_loss_scaling(Precision precision);

/// Sets how fp32 GEMMs run on CUDA for this precision: TF32 tensor cores for
/// tf32, full fp32 otherwise; restores the previous setting when it ends.
class MatmulPrecisionGuard {
 public:
  explicit MatmulPrecisionGuard(Precision precision);
  ~MatmulPrecisionGuard();
  MatmulPrecisionGuard(const MatmulPrecisionGuard&) = delete;
  MatmulPrecisionGuard& operator=(const MatmulPrecisionGuard&) = delete;

 private:
  bool previous_cublas_;
  bool previous_cudnn_;
};

// ---------------------------------------------------------------------------
// GradScaler: dynamic loss scaling for fp16, with torch.amp.GradScaler's
// arithmetic (scale, unscale and check, update), built on the same ATen ops
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_). Unlike
// torch.amp.GradScaler it handles complex gradients: they are unscaled and
// checked through their real views, both parts.
//
//   loss = scaler.scale(loss); loss.backward();
//   if (scaler.unscale(params)) optimizer.step();   // false: skipped, non-finite
//   scaler.update();
// or, without a host read (a step captured in a CUDA graph):
//   adamw.step_on_device(scaler.unscale_on_device(params));
//   scaler.update();
// ---------------------------------------------------------------------------
struct GradScalerOptions {
  /// The first scale.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// The scale is multiplied by this after growth_interval finite steps in a row.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// ... and by this after a step with non-finite gradients (which is skipped).
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Finite steps in a row before the scale grows.
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {}, torch::Device device = torch::kCPU);

  /// loss * scale (a float multiply on the device: no synchronization).
  torch::Tensor scale(const torch::Tensor& loss) const;
  /// A loss scaled by scale(), divided back (before update() changes the scale).
  torch::Tensor unscaled(const torch::Tensor& scaled_loss) const;
  /// Divides every defined gradient of `params` by the scale, in place, and
  /// returns whether all of them are finite (one device-to-host read). When
  /// not, the step must be skipped; update() then backs the scale off.
  bool unscale(const std::vector<torch::Tensor>& params);
  /// unscale() without the host read, for a step captured in a CUDA graph:
  /// returns a [1] float tensor on the device, 1 when every gradient is finite
  /// (the optimizer steps), 0 when not (AdamW::step_on_device skips the step
  /// on the device); a skipped step is counted on the device.
  torch::Tensor unscale_on_device(const std::vector<torch::Tensor>& params);
  /// Grows or backs off the scale after unscale() or unscale_on_device().
  void update();

  /// Several ranks that must take one decision (a step split across ranks,
  /// where each rank's gradients are its band's share): after each unscale()
  /// `sum` adds the [1] float32 found-inf flag (1: this rank saw a non-finite
  /// gradient) over the ranks in place, before the decision, so that every
  /// rank skips the same steps and keeps the same scale. Null (the default):
  /// this rank's own verdict. unscale_on_device() (a CUDA graph, which takes
  /// no collective) refuses while it is set.
  void set_found_inf_sum(std::function<void(torch::Tensor&)> sum);

  /// The current scale.
  double scale_value() const;
  /// Steps skipped so far for non-finite gradients (reads the device's count
  /// of unscale_on_device's skips).
  int64_t skipped_steps() const;
  const GradScalerOptions& options() const { return options_; }

  /// The state to checkpoint: "scale" [1] float, "growth_tracker" [1] int32 and
  /// "skipped" [] int64, all on the CPU.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state);

 private:
  // Divides the gradients by the scale and sets found_inf_ when one is not finite.
  void unscale_and_check(const std::vector<torch::Tensor>& params);
  GradScalerOptions options_;
  torch::Tensor scale_;           // [1] float32 on the device
  torch::Tensor growth_tracker_;  // [1] int32 on the device
  torch::Tensor found_inf_;       // [1] float32 on the device: the last unscale's verdict
  torch::Tensor skipped_device_;  // [1] float64 on the device: unscale_on_device's skips
  int64_t skipped_ = 0;           // unscale's skips
  std::function<void(torch::Tensor&)> found_inf_sum_;  // over the ranks of one decision
};

}  // namespace fno
