#include <fno_train/train_step.h>

#include <fno_train/rollout.h>

#include <utility>

namespace fno {

OffloadSettings offload_settings(const OffloadConfig& c, PlanCacheText plan_cache) {
  OffloadSettings o;
  o.policy = c.policy;
  o.gpu_memory_limit = c.gpu_memory_limit;
  o.chunks = c.chunks;
  o.micro_batches = c.micro_batches;
  o.options.min_bytes(c.min_bytes)
      .prefetch_depth(c.prefetch_depth)
      .max_inflight_bytes(c.max_inflight_mib > 0 ? c.max_inflight_mib << 20 : int64_t{1} << 30)
      .max_prefetch_bytes(c.max_prefetch_mib << 20)
      .host_memory_limit(c.host_memory_limit)
      .compress(c.compress);
  o.learn_inflight = c.max_inflight_mib == 0;
  if (plan_cache == PlanCacheText::kDirectory) {
    o.plan_cache_dir = c.plan_cache;
  } else {
    o.plan_cache_dir = c.plan_cache == "none" ? std::string()
                       : c.plan_cache.empty() ? default_plan_cache_dir()
                                              : c.plan_cache;
  }
  return o;
}

TrainStep::TrainStep(OffloadedStep& step, torch::optim::Optimizer& optimizer, StepLoss loss,
                     GradScaler* scaler, dist::GradientSync* sync)
    : step_(step), optimizer_(optimizer), loss_(std::move(loss)), scaler_(scaler) {
  for (const auto& group : optimizer_.param_groups()) {
    for (const auto& p : group.params()) params_.push_back(p);
  }
  set_gradient_sync(sync);
}

TrainStep::~TrainStep() {
  if (sync_ != nullptr) step_.set_before_final_backward(nullptr);
}

void TrainStep::set_gradient_sync(dist::GradientSync* sync) {
  sync_ = sync;
  // The buckets are armed just before the backward pass that completes the
  // gradients (the last micro-batch's), and reduced as backward produces them.
  if (sync_ != nullptr) {
    step_.set_before_final_backward([this](const std::string& key) { sync_->arm(key); });
  } else {
    step_.set_before_final_backward(nullptr);
  }
}

void TrainStep::set_rollout(int64_t steps) {
  TORCH_CHECK(steps >= 0, "TrainStep: rollout steps must be >= 0, got ", steps);
  rollout_steps_ = steps;
}

at::Tensor TrainStep::forward_backward(const at::Tensor& x, const at::Tensor& y) {
  optimizer_.zero_grad();
  if (rollout_steps_ > 0) {
    // x: [B, t_in, *S], y: [B, steps, *S]; backward through every step.
    auto loss = step_.forward_backward_composite(
        x, y,
        [this](const OffloadedStep::ModelForward& model, const at::Tensor& xx,
               const at::Tensor& yy) {
          auto l = rollout_loss(loss_, rollout(model, xx, rollout_steps_), yy);
          return scaler_ != nullptr ? scaler_->scale(l) : l;
        });
    if (sync_ != nullptr) sync_->finish();
    return loss;
  }
  // The loss adds over batch entries, so that the step may run as micro-batches
  // (offload auto). fp16: the loss is scaled before backward, so that small
  // gradients survive fp16's range.
  auto loss = step_.forward_backward(x, y, [this](const at::Tensor& out, const at::Tensor& yy) {
    auto l = loss_(out, yy);
    return scaler_ != nullptr ? scaler_->scale(l) : l;
  });
  // Several ranks: wait for the gradient buckets (started during backward)
  // and take the sums over ranks.
  if (sync_ != nullptr) sync_->finish();
  return loss;
}

StepResult TrainStep::update(const at::Tensor& loss) {
  StepResult r;
  r.loss = loss;
  if (scaler_ == nullptr) {
    optimizer_.step();
    return r;
  }
  // Unscale (complex gradients through their real views) and skip the step
  // when a gradient is not finite; the scale backs off or grows.
  r.stepped = scaler_->unscale(params_);
  if (r.stepped) optimizer_.step();
  r.loss = scaler_->unscaled(loss);
  scaler_->update();
  return r;
}

StepResult TrainStep::run(const at::Tensor& x, const at::Tensor& y) {
  return update(forward_backward(x, y));
}

}  // namespace fno
