// One training step, the one fno_train (Trainer) and fno_bench (the bench
// runner) both take: zero the gradients; forward, loss and backward under the
// offload policy (OffloadedStep); the gradient all-reduce over ranks; fp16's
// loss scaler (scale the loss, unscale and check the gradients, update the
// scale); the optimizer step. And the one place that turns the config's
// offload section into OffloadSettings.
//
//   TrainStep step(offloaded, optimizer, loss, scaler, sync);
//   const auto r = step.run(x, y);  // r.loss, r.stepped
//
// A rolled-out step (set_rollout(t_out), the recurrent Navier-Stokes model)
// runs the model t_out times (fno_train/rollout.h), adds the loss of every
// step and runs backward once through the whole rollout; the rest is the same.
#pragma once

#include <fno/precision.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>
#include <fno_train/offload_step.h>

#include <torch/optim/optimizer.h>

#include <functional>
#include <vector>

namespace fno {

/// How OffloadConfig::plan_cache names auto's plan cache: fno_train's key
/// offload.plan_cache reads '' as the default cache (default_plan_cache_dir())
/// and 'none' as no cache; fno_bench --plan-cache names a directory, '' none.
enum class PlanCacheText { kConfigKey, kDirectory };

/// The offload settings of a step from the config's offload section (the
/// policy included); plan_file stays empty.
OffloadSettings offload_settings(const OffloadConfig& config, PlanCacheText plan_cache);

/// A loss over (output, target) that adds over batch entries (LpLoss, H1Loss
/// with reduction sum), so that a step may run as micro-batches.
using StepLoss = std::function<at::Tensor(const at::Tensor& out, const at::Tensor& y)>;

/// What one step did.
struct StepResult {
  /// The batch's loss as the loss function gives it (fp16: unscaled), detached, on the device.
  at::Tensor loss;
  /// Whether the optimizer stepped; false when fp16's scaler found a non-finite
  /// gradient and skipped the step (the scale then backs off).
  bool stepped = true;
};

class TrainStep {
 public:
  /// References, does not own: `step` and `optimizer`, the fp16 `scaler`
  /// (null in other precisions) and the gradient `sync` (null for one rank);
  /// they must outlive this. The scaler unscales the optimizer's parameters.
  TrainStep(OffloadedStep& step, torch::optim::Optimizer& optimizer, StepLoss loss,
            GradScaler* scaler = nullptr, dist::GradientSync* sync = nullptr);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  /// The whole step: forward_backward(x, y), then update().
  // x: [B, Cin, *S], y: [B, Cout, *S]
  StepResult run(const at::Tensor& x, const at::Tensor& y);

  /// The first half: zero the gradients; forward, loss (scaled in fp16) and
  /// backward under the offload plan; with several ranks, wait for the
  /// gradient all-reduce. Returns the loss backward saw, detached. Throws what
  /// OffloadedStep throws (offload::BudgetError, c10::OutOfMemoryError).
  at::Tensor forward_backward(const at::Tensor& x, const at::Tensor& y);
  /// The second half: fp16 unscales and checks the gradients; the optimizer
  /// steps unless a gradient is not finite; the scale is updated.
  StepResult update(const at::Tensor& loss);

  /// Reduce the gradients over ranks from the next step on (null: this rank alone).
  void set_gradient_sync(dist::GradientSync* sync);

  /// From the next step on, roll the model out `steps` times per step (x: [B,
  /// t_in, *S], y: [B, steps, *S]; the loss summed over the steps); 0: one
  /// forward (the default). A rollout needs offload policy none and one
  /// micro-batch (forward_backward throws std::invalid_argument otherwise).
  void set_rollout(int64_t steps);
  int64_t rollout_steps() const { return rollout_steps_; }

 private:
  OffloadedStep& step_;
  torch::optim::Optimizer& optimizer_;
  StepLoss loss_;
  GradScaler* scaler_;
  dist::GradientSync* sync_ = nullptr;
  int64_t rollout_steps_ = 0;
  std::vector<at::Tensor> params_;  // the optimizer's, for the scaler
};

}  // namespace fno
