// AdamW with neuraloperator 2.0.0's semantics (or torch.optim.Adam's, the FNO
// paper's optimizer), and the learning-rate schedules neuraloperator's recipes
// use, with torch.optim.lr_scheduler's arithmetic.
#pragma once

#include <fno/serialize.h>

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace fno {

// ---------------------------------------------------------------------------
// AdamW (neuralop.training.AdamW):
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g conj(g)   (complex-aware |g|^2)
//   p -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
//   p -= lr * weight_decay * p                             (decoupled, after the update)
// With torch_adam (torch.optim.Adam, the optimizer of the FNO paper's scripts):
//   g += weight_decay * p                                  (an L2 term, before the moments)
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2   (complex parameters as real pairs)
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// ---------------------------------------------------------------------------
struct AdamWOptions : public torch::optim::OptimizerCloneableOptions<AdamWOptions> {
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit like torch's options
  /// Learning rate.
  TORCH_ARG(double, lr) = 1e-3;
  /// Decay rates of the first and second moments.
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  /// Added to sqrt(v); neuraloperator's default is 1e-6 (torch's is 1e-8).
  TORCH_ARG(double, eps) = 1e-6;
  /// Decoupled weight decay, applied after the Adam update.
  TORCH_ARG(double, weight_decay) = 0.0;
  /// Bias-correct the moments.
  TORCH_ARG(bool, correct_bias) = true;
  /// torch.optim.Adam's step instead of neuraloperator's AdamW: weight_decay is
  /// an L2 term added to the gradient, eps is added to the bias-corrected
  /// sqrt(v), and a complex parameter's real and imaginary parts have their own
  /// second moments (torch's view_as_real). The FNO paper's scripts train with
  /// it (torch.optim.Adam, weight decay 1e-4; its eps is 1e-8).
  TORCH_ARG(bool, torch_adam) = false;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdamWParamState : public torch::optim::OptimizerCloneableParamState<AdamWParamState> {
  /// Steps taken for this parameter.
  TORCH_ARG(int64_t, step) = 0;
  /// First moment (dtype of the parameter).
  TORCH_ARG(torch::Tensor, exp_avg);
  /// Second moment g*conj(g) (complex with zero imaginary part for complex parameters).
  TORCH_ARG(torch::Tensor, exp_avg_sq);
};

class AdamW : public torch::optim::Optimizer {
 public:
  explicit AdamW(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
                 AdamWOptions defaults = {});
  explicit AdamW(std::vector<torch::Tensor> params, AdamWOptions defaults = {})
      : AdamW({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  torch::Tensor step(LossClosure closure = nullptr) override;

  /// Moments, step counts and group learning rates, keyed
  /// "state.<i>.exp_avg|exp_avg_sq|step" by parameter position and "group.<g>.lr".
  TensorDict state_dict() const;
  /// Restores what state_dict() wrote, for the same parameters in the same order.
  void load_state_dict(const TensorDict& state);

  // The step on the device, for a step captured in a CUDA graph
  // (fno_engine/graphed_step.h): each group's learning rate and step count live
  // in float64 tensors on its parameters' device, the bias correction is
  // computed there, and fp16's skipped step is decided there. The arithmetic
  // is step()'s in the same order (step sizes in float64, then the parameters'
  // type), so the two agree to rounding. The state dict keeps its format.

  /// Turns the device step on (step() then takes it) or off (the step counts
  /// go back to the host state). Each group's parameters must share one step
  /// count (as they do when they all step together); std::invalid_argument
  /// naming the group otherwise.
  void set_device_step(bool on);
  bool device_step() const { return device_step_; }
  /// Writes each group's learning rate, as its options hold it (the scheduler
  /// sets it there), into its device tensor when it changed since the last
  /// write: a fill on the current stream, no host read. The device step calls
  /// it; a captured step needs it called before each replay.
  void write_lr();
  /// One device step (set_device_step(true) first). Every parameter needs a
  /// gradient. `keep`, when defined, is a one-element float tensor on the
  /// parameters' device: 1 takes the step, 0 leaves parameters, moments and
  /// step counts as they are (fp16's step with a non-finite gradient; the
  /// gradients are then zeroed).
  void step_on_device(const torch::Tensor& keep = {});

 private:
  // A group's learning rate and step count on the device, [] float64.
  struct DeviceGroup {
    torch::Tensor lr, step;
    double lr_written = 0;
  };
  // The step count all parameters of group g share (0 before the first step).
  int64_t group_step(size_t g) const;
  std::vector<DeviceGroup> device_;
  bool device_step_ = false;
};

// ---------------------------------------------------------------------------
// Gradient clipping by the total 2-norm, with torch::nn::utils::clip_grad_norm_'s
// arithmetic (every defined gradient scaled by min(1, max_norm / (norm + 1e-6))),
// but without its host read: the norm stays a device scalar, so that a CUDA
// graph can capture the clipping and the step does not wait for the GPU.
// Complex gradients count |g|^2. Returns the total norm before clipping,
// [] float32 on the gradients' device (undefined when no gradient is defined);
// max_norm = inf measures without clipping.
// ---------------------------------------------------------------------------
torch::Tensor clip_grad_norm_(const std::vector<torch::Tensor>& params, double max_norm);

// ---------------------------------------------------------------------------
// Schedulers: step() once per epoch, after the optimizer steps.
// ---------------------------------------------------------------------------
class LRScheduler {
 public:
  explicit LRScheduler(torch::optim::Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  /// Advances one epoch. `metric` is required by ReduceLROnPlateau and ignored by the others.
  virtual void step(std::optional<double> metric = std::nullopt) = 0;
  /// Learning rate of each param group now.
  std::vector<double> get_last_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  /// Name and settings, one line.
  virtual std::string describe() const = 0;
  /// State as tensors (float64 scalars), for checkpoints.
  virtual TensorDict state_dict() const;
  virtual void load_state_dict(const TensorDict& state);

 protected:
  void set_lrs(const std::vector<double>& lrs);
  torch::optim::Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

/// Multiplies the lr by gamma every step_size epochs (torch.optim.lr_scheduler.StepLR).
class StepLR : public LRScheduler {
 public:
  StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  void step(std::optional<double> metric = std::nullopt) override;
  std::string describe() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// Cosine annealing (torch.optim.lr_scheduler.CosineAnnealingLR, recursive form).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  void step(std::optional<double> metric = std::nullopt) override;
  std::string describe() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

struct ReduceLROnPlateauOptions {
  /// "min": lower metric is better; "max": higher is better.
  TORCH_ARG(std::string, mode) = "min";
  /// lr <- max(lr * factor, min_lr) on a plateau; must be < 1.
  TORCH_ARG(double, factor) = 0.1;
  /// Epochs without improvement tolerated before reducing.
  TORCH_ARG(int64_t, patience) = 10;
  /// Least change that counts as an improvement.
  TORCH_ARG(double, threshold) = 1e-4;
  /// "rel" (threshold is relative to the best) or "abs".
  TORCH_ARG(std::string, threshold_mode) = "rel";
  /// Epochs to wait after a reduction before counting bad epochs again.
  TORCH_ARG(int64_t, cooldown) = 0;
  /// Lower bound on the lr.
  TORCH_ARG(double, min_lr) = 0.0;
  /// Reductions smaller than this are skipped.
  TORCH_ARG(double, eps) = 1e-8;
};

/// Reduces the lr when a metric stops improving (torch.optim.lr_scheduler.ReduceLROnPlateau).
class ReduceLROnPlateau : public LRScheduler {
 public:
  ReduceLROnPlateau(torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(std::optional<double> metric = std::nullopt) override;
  std::string describe() const override;
  TensorDict state_dict() const override;
  void load_state_dict(const TensorDict& state) override;

 private:
  bool is_better(double a, double best) const;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace fno
