#include <fno_train/train_step.h>

#include <fno/losses.h>
#include <fno_engine/rollout.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
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
      .max_inflight_bytes(c.max_inflight_mib > 0 ? c.max_inflight_mib << 20
                                                 : offload::OffloadOptions().max_inflight_bytes())
      .max_prefetch_bytes(c.max_prefetch_mib << 20)
      .host_memory_limit(c.host_memory_limit)
      .compress(c.compress);
  o.learn_inflight = c.max_inflight_mib == 0;
  o.search_seconds = c.search_seconds;
  if (plan_cache == PlanCacheText::kDirectory) {
    o.plan_cache_dir = c.plan_cache;
  } else {
    o.plan_cache_dir = c.plan_cache == "none" ? std::string()
                       : c.plan_cache.empty() ? default_plan_cache_dir()
                                              : c.plan_cache;
  }
  return o;
}

std::string word_memory_advice(const StepMemoryAdvice& a, const offload::Policy& current) {
  using offload::format_bytes;
  const auto flags = [](const offload::PolicyChoice& c) {
    return "--offload " + c.policy.text +
           (c.chunks > 1 ? " --set offload.chunks=" + std::to_string(c.chunks) : std::string());
  };
  std::string autos;
  if (a.auto_micro_batches > 0) {
    autos = "--offload auto fits it (estimated peak " + format_bytes(a.auto_estimate.peak_bytes) +
            " with " + std::to_string(a.auto_micro_batches) + " micro-batch(es))";
  } else if (a.auto_tiles) {
    autos = "--offload auto trains it in spatial tiles (estimated peak " +
            format_bytes(a.tiles_peak) + ", " + format_bytes(a.tiles_host) +
            " of pinned host memory)";
  }
  if (!a.profiled) {
    if (!autos.empty()) return "even one batch entry does not fit whole; " + autos;
    return "even one batch entry does not fit to be measured; try --offload recompute+offload "
           "--set offload.chunks=" +
           std::to_string(a.batch) + ", or lower data.batch_size or the grid";
  }
  std::string o;
  if (a.fixed.has_current) {
    o = "policy " + current.text + " needs about " + format_bytes(a.fixed.current.peak_bytes) +
        " (estimated), ";
  }
  o += "the device has " + format_bytes(a.fixed.capacity) + "; ";
  if (a.fixed.fits) {
    return o + "try " + flags(a.fixed.fastest) + " (estimated peak " +
           format_bytes(a.fixed.fastest.estimate.peak_bytes) + ") or --offload auto";
  }
  if (!autos.empty()) return o + "no fixed policy is estimated to fit; " + autos;
  return o + "no policy is estimated to fit (the least is " + flags(a.fixed.least) + ", about " +
         format_bytes(a.fixed.least.estimate.peak_bytes) + "): lower data.batch_size or the grid";
}

GraphDecision use_cuda_graphs(TrainStep& step, const GraphConditions& gc, double auto_limit_ms) {
  auto decision = decide_cuda_graphs(gc);
  if (!decision.use) return decision;
  const double limit =
      gc.mode == CudaGraphs::kAuto ? (auto_limit_ms > 0 ? auto_limit_ms : kAutoGraphLimitMs) : 0;
  try {
    step.enable_cuda_graphs(TrainStep::kGraphWarmup, limit);
  } catch (const std::invalid_argument& e) {
    decision.use = false;
    decision.message = gc.key + " " + to_string(gc.mode) + ": " + e.what() + "; steps run eagerly";
  }
  return decision;
}

StepLoss relative_loss(LossName name, int64_t d) {
  if (name == LossName::kH1) {
    return [h1 = H1Loss(H1LossOptions().d(d))](const auto& a, const auto& b) { return h1(a, b); };
  }
  return
      [l2 = LpLoss(LpLossOptions().d(d).p(2))](const auto& a, const auto& b) { return l2(a, b); };
}

StepLoss training_loss(const TrainingConfig& training, int64_t d,
                       const data::UnitGaussianNormalizer* out_norm) {
  auto loss = relative_loss(training.loss, d);
  if (training.loss_on != LossSpace::kDecoded || out_norm == nullptr || !out_norm->fitted()) {
    return loss;
  }
  return [loss, out_norm](const at::Tensor& out, const at::Tensor& y) {
    return loss(out_norm->inverse_transform(out), out_norm->inverse_transform(y));
  };
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
  sync_ = nullptr;  // (the caller's: it may be gone before this)
  try {
    disable_cuda_graphs();
  } catch (...) {  // (a destructor: a CUDA error here has been reported before)
  }
}

void TrainStep::set_gradient_sync(dist::GradientSync* sync, bool overlap) {
  TORCH_CHECK(!graphs_, "TrainStep: set the gradient sync before enabling CUDA graphs");
  if (sync_ != nullptr) hook_sync(false);
  sync_ = sync;
  overlap_ = overlap;
  hook_sync(sync_ != nullptr && overlap_);
}

void TrainStep::hook_sync(bool on) {
  // The buckets are armed just before the backward pass that completes the
  // gradients (the last micro-batch's), and reduced as backward produces them.
  if (sync_ != nullptr) sync_->set_hooks(on);
  if (on) {
    step_.set_before_final_backward([this](const std::string& key) { sync_->arm(key); });
  } else {
    step_.set_before_final_backward(nullptr);
  }
}

void TrainStep::set_max_grad_norm(double max_norm) {
  TORCH_CHECK(!graphs_, "TrainStep: set the gradient clipping before enabling CUDA graphs");
  TORCH_CHECK(max_norm >= 0 && !std::isnan(max_norm),
              "TrainStep: max_grad_norm must be >= 0 (0: off, inf: measure only), got ", max_norm);
  max_grad_norm_ = max_norm;
}

void TrainStep::set_rollout(int64_t steps) {
  TORCH_CHECK(steps >= 0, "TrainStep: rollout steps must be >= 0, got ", steps);
  rollout_steps_ = steps;
}

at::Tensor TrainStep::loss_and_backward(const at::Tensor& x, const at::Tensor& y) {
  if (rollout_steps_ > 0) {
    // x: [B, t_in, *S], y: [B, steps, *S]; backward through every step.
    return step_.forward_backward_composite(x, y,
                                            [this](const OffloadedStep::ModelForward& model,
                                                   const at::Tensor& xx, const at::Tensor& yy) {
                                              auto l = rollout_loss(
                                                  loss_, rollout(model, xx, rollout_steps_), yy);
                                              return scaler_ != nullptr ? scaler_->scale(l) : l;
                                            });
  }
  // The loss adds over batch entries, so that the step may run as micro-batches
  // (offload auto). fp16: the loss is scaled before backward, so that small
  // gradients survive fp16's range.
  return step_.forward_backward(x, y, [this](const at::Tensor& out, const at::Tensor& yy) {
    auto l = loss_(out, yy);
    return scaler_ != nullptr ? scaler_->scale(l) : l;
  });
}

at::Tensor TrainStep::forward_backward(const at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK(!graphs_, "TrainStep: under CUDA graphs run() takes the whole step");
  optimizer_.zero_grad();
  auto loss = loss_and_backward(x, y);
  // Several ranks: wait for the gradient buckets (started during backward)
  // and take the sums over ranks.
  if (sync_ != nullptr && overlap_) sync_->finish();
  if (sync_ != nullptr && !overlap_) {
    // (NCCL: ordered on the stream; update() drains them once it has queued
    // the optimizer's step behind them.)
    sync_->pack();
    sync_->reduce();
    sync_->unpack();
  }
  return loss;
}

StepResult TrainStep::update(const at::Tensor& loss) {
  TORCH_CHECK(!graphs_, "TrainStep: under CUDA graphs run() takes the whole step");
  StepResult r;
  r.loss = loss;
  // fp16: unscale (complex gradients through their real views) and skip the
  // step when a gradient is not finite; the scale backs off or grows.
  if (scaler_ != nullptr) r.stepped = scaler_->unscale(params_);
  if (max_grad_norm_ > 0) r.grad_norm = clip_grad_norm_(params_, max_grad_norm_);
  if (r.stepped) optimizer_.step();
  if (scaler_ != nullptr) {
    r.loss = scaler_->unscaled(loss);
    scaler_->update();
  }
  // No sum left in flight: the host may read what the step made.
  if (sync_ != nullptr) sync_->drain();
  return r;
}

StepResult TrainStep::run(const at::Tensor& x, const at::Tensor& y) {
  if (!graphs_) return update(forward_backward(x, y));
  // The scheduler's learning rate into the device tensor the step reads.
  adamw_->write_lr();
  std::vector<at::Tensor> out;
  try {
    // (A replay records no memory timeline: that step runs eagerly.)
    out = step_.timeline_requested() ? graphs_->run_eager({x, y}) : graphs_->run({x, y});
  } catch (const GraphCaptureError& e) {
    std::fprintf(stderr, "fno: %s; steps run eagerly\n", e.what());
    disable_cuda_graphs();
    return update(forward_backward(x, y));
  }
  if (const auto note = graphs_->take_note(); !note.empty()) {
    std::fprintf(stderr, "fno: %s\n", note.c_str());
  }
  if (sync_ != nullptr) {
    // Several ranks: the all-reduce between the two graphs, then the update.
    sync_->reduce();
    const auto loss = out.at(0);
    try {
      out = step_.timeline_requested() ? update_graphs_->run_eager({loss})
                                       : update_graphs_->run({loss});
    } catch (const GraphCaptureError& e) {
      // The sums are in the buckets: finish this step eagerly from them.
      std::fprintf(stderr, "fno: %s; steps run eagerly\n", e.what());
      disable_cuda_graphs();
      sync_->unpack();
      return update(loss);
    }
  }
  if (sync_ != nullptr) sync_->drain();
  StepResult r;
  size_t k = 0;
  r.loss = out.at(k++);
  if (scaler_ != nullptr) r.taken = out.at(k++);
  if (max_grad_norm_ > 0) r.grad_norm = out.at(k);  // (device_update's outputs)
  return r;
}

void TrainStep::enable_cuda_graphs(int64_t warmup, double capture_limit_ms) {
  if (graphs_) return;
  const auto refuse = [](const std::string& why) {
    throw std::invalid_argument("CUDA graphs: " + why);
  };
  auto* adamw = dynamic_cast<AdamW*>(&optimizer_);
  if (adamw == nullptr) refuse("the optimizer is not fno::AdamW (its device step)");
  if (params_.empty()) refuse("the optimizer has no parameters");
  const auto device = params_.front().device();
  if (!device.is_cuda()) refuse("the parameters are on " + device.str() + ", not a CUDA device");
  if (step_.band().split()) refuse("the step is split across ranks (distributed.domain_parallel)");
  if (!step_.plain()) {
    refuse("the step runs under an offload policy or in micro-batches (" + step_.plan_text() + ")");
  }
  if (!cuda_graphs_built()) refuse("this build has no CUDA");
  adamw->set_device_step(true);  // (throws std::invalid_argument: step counts differ)
  adamw_ = adamw;
  try {
    graphs_ = std::make_unique<GraphedFunction>(
        [this](const std::vector<at::Tensor>& in) { return graph_body(in); }, device, warmup);
    graphs_->set_capture_limit_ms(capture_limit_ms);
    if (sync_ != nullptr) {
      update_graphs_ = std::make_unique<GraphedFunction>(
          [this](const std::vector<at::Tensor>& in) { return update_body(in); }, device, warmup,
          graphs_->pool());
    }
  } catch (...) {
    update_graphs_.reset();
    graphs_.reset();
    adamw_->set_device_step(false);
    adamw_ = nullptr;
    throw;
  }
  if (sync_ != nullptr) hook_sync(false);  // (no hooks: pack, reduce, unpack)
}

void TrainStep::disable_cuda_graphs() {
  if (!graphs_) return;
  update_graphs_.reset();
  graphs_.reset();
  if (sync_ != nullptr && overlap_) hook_sync(true);
  for (auto& p : params_) p.mutable_grad() = at::Tensor();  // (they were the graphs')
  adamw_->set_device_step(false);
  adamw_ = nullptr;
}

bool TrainStep::captured(const at::Tensor& x, const at::Tensor& y) const {
  return graphs_ && graphs_->captured({x, y});
}

int64_t TrainStep::graph_peak_bytes() const { return graphs_ ? graphs_->peak_bytes() : 0; }

std::shared_ptr<GraphPool> TrainStep::graph_pool() const {
  return graphs_ ? graphs_->pool() : nullptr;
}

std::vector<at::Tensor> TrainStep::graph_body(const std::vector<at::Tensor>& inputs) {
  // The gradients: undefined up to the first capture, so that its backward
  // makes them in the graphs' memory pool; from then on they stay there,
  // zeroed at the start of every step and added into by backward, so that
  // every graph reads and writes the same ones.
  if (graphs_->graphs() + (update_graphs_ ? update_graphs_->graphs() : 0) > 0) {
    std::vector<at::Tensor> grads;
    for (const auto& p : params_) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    at::_foreach_zero_(grads);
  } else {
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
  }
  auto loss = loss_and_backward(inputs.at(0), inputs.at(1));
  // Several ranks: the gradients into the buckets; run() reduces them and
  // update_body() takes the step.
  if (sync_ != nullptr) {
    sync_->pack();
    return {loss};
  }
  return device_update(loss);
}

std::vector<at::Tensor> TrainStep::update_body(const std::vector<at::Tensor>& inputs) {
  sync_->unpack();
  // (the input buffer is the graph's: an output of its own)
  return device_update(inputs.at(0).clone());
}

std::vector<at::Tensor> TrainStep::device_update(at::Tensor loss) {
  // fp16: unscale and check the gradients on the device; a non-finite one
  // makes AdamW skip the step there, and the scale backs off.
  const auto keep = scaler_ != nullptr ? scaler_->unscale_on_device(params_) : at::Tensor();
  const auto norm = max_grad_norm_ > 0 ? clip_grad_norm_(params_, max_grad_norm_) : at::Tensor();
  adamw_->step_on_device(keep);
  std::vector<at::Tensor> out{loss};
  if (scaler_ != nullptr) {
    out[0] = scaler_->unscaled(loss);
    scaler_->update();
    out.push_back(keep);
  }
  if (norm.defined()) out.push_back(norm);
  return out;
}

}  // namespace fno
