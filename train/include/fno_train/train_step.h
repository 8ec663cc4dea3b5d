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
// runs the model t_out times (fno_engine/rollout.h), adds the loss of every
// step and runs backward once through the whole rollout; the rest is the same.
//
// With enable_cuda_graphs() run() takes the whole step (forward, loss,
// backward, fp16's scaler, AdamW) as one CUDA graph per input shape
// (fno_engine/graphed_step.h), the rollout included. Over several ranks a step
// is two graphs: forward and backward up to the gradients packed into their
// buckets, then the optimizer; the all-reduce runs between them, outside any
// graph (GradientSync::reduce).

#pragma once

#include <fno/optim.h>
#include <fno/precision.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <vector>

namespace fno {

/// How OffloadConfig::plan_cache names auto's plan cache: fno_train's key
/// offload.plan_cache reads '' as the default cache (default_plan_cache_dir())
/// and 'none' as no cache; fno_bench --plan-cache names a directory, '' none.
enum class PlanCacheText { kConfigKey, kDirectory };

/// The offload settings of a step from the config's offload section (the
/// policy included); plan_file stays empty.
OffloadSettings offload_settings(const OffloadConfig& config, PlanCacheText plan_cache);

/// One line of advice for a step that ran out of GPU memory, in fno_train's
/// flags (--offload POLICY, --set offload.chunks=K): the estimated need of
/// `current`, the fastest fixed policy that fits, else auto's plan, else what
/// to lower.
std::string word_memory_advice(const StepMemoryAdvice& advice, const offload::Policy& current);

/// A loss over (output, target) that adds over batch entries (LpLoss, H1Loss
/// with reduction sum), so that a step may run as micro-batches.
using StepLoss = std::function<at::Tensor(const at::Tensor& out, const at::Tensor& y)>;

/// The relative H1 or L2 loss over a d-dim grid, summed over the batch.
StepLoss relative_loss(LossName name, int64_t d);

/// training.loss over a d-dim grid (relative_loss). With
/// training.loss_on decoded and a fitted `out_norm`, output and target are both
/// decoded by it first; the loss then references `out_norm`, which must
/// outlive it, and reads its statistics in place (a captured step sees them).
StepLoss training_loss(const TrainingConfig& training, int64_t d,
                       const data::UnitGaussianNormalizer* out_norm = nullptr);

/// Decides whether a run's steps are captured as CUDA graphs
/// (decide_cuda_graphs) and turns them on in `step` when they are, with
/// auto's capture limit (kAutoGraphLimitMs, or `auto_limit_ms` when > 0) for
/// mode auto. The decision's message (possibly "") is the one line to say,
/// once; fno_train and fno_bench both take this path.
GraphDecision use_cuda_graphs(class TrainStep& step, const GraphConditions& conditions,
                              double auto_limit_ms = 0);

/// What one step did.
struct StepResult {
  /// The batch's loss as the loss function gives it (fp16: unscaled), detached, on the device.
  at::Tensor loss;
  /// Whether the optimizer stepped; false when fp16's scaler found a non-finite
  /// gradient and skipped the step (the scale then backs off).
  bool stepped = true;
  /// A step under CUDA graphs in fp16: [1] float on the device, 1 when the
  /// optimizer stepped, 0 when it skipped (`stepped` then says nothing);
  /// undefined otherwise.
  at::Tensor taken;
  /// With gradient clipping (TrainStep::set_max_grad_norm): the gradients'
  /// total 2-norm before clipping (fp16: unscaled), [] float32 on the device;
  /// undefined otherwise.
  at::Tensor grad_norm;
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

  /// The whole step: forward_backward(x, y), then update(); under CUDA graphs
  /// the graph of the inputs' shapes (the result's loss is then the graph's
  /// output: valid until the next step or evaluation graph runs).
  // x: [B, Cin, *S], y: [B, Cout, *S]
  StepResult run(const at::Tensor& x, const at::Tensor& y);

  /// The first half: zero the gradients; forward, loss (scaled in fp16) and
  /// backward under the offload plan; with several ranks, the gradient
  /// all-reduce (with NCCL and no overlap, ordered on the stream: update()
  /// waits for it once the optimizer's step is queued behind it, and the
  /// host reads no gradient before). Returns the loss backward saw, detached. Throws what
  /// OffloadedStep throws (offload::BudgetError, c10::OutOfMemoryError).
  /// Not under CUDA graphs (run() takes the step).
  at::Tensor forward_backward(const at::Tensor& x, const at::Tensor& y);
  /// The second half: fp16 unscales and checks the gradients; the gradients
  /// are clipped (set_max_grad_norm); the optimizer steps unless a gradient is
  /// not finite; the scale is updated.
  StepResult update(const at::Tensor& loss);

  /// Reduce the gradients over ranks from the next step on (null: this rank
  /// alone). `overlap`: buckets start during backward (hooks); off: after
  /// backward, all at once (pack, reduce, unpack), for a step whose gradients
  /// accumulate outside autograd's hooks (a tiled step split across ranks).
  /// Before enable_cuda_graphs().
  void set_gradient_sync(dist::GradientSync* sync, bool overlap = true);

  /// From the next step on, run() takes each step as a CUDA graph, one per
  /// input shape: the first `warmup` steps of a shape run eagerly on the
  /// graphs' side stream, the next is captured and replayed. The optimizer
  /// (fno::AdamW) takes its device step (the learning rate as the scheduler
  /// last set it, written to the device before each step), fp16's scaler
  /// unscale_on_device, and the gradients live in the graphs' memory pool.
  /// A step whose memory timeline is recorded runs eagerly. A capture that
  /// fails turns the graphs off (one line on stderr) and the step runs
  /// eagerly; a shape whose capture runs out of memory, or whose last warm-up
  /// took longer than `capture_limit_ms` (> 0: auto's kAutoGraphLimitMs),
  /// runs eagerly from then on (one line on stderr). Throws
  /// std::invalid_argument, naming it, for what graphs cannot take: a device
  /// that is not CUDA, an offload policy other than none, more than one
  /// micro-batch, an optimizer other than fno::AdamW or one
  /// whose groups' step counts differ.
  void enable_cuda_graphs(int64_t warmup = kGraphWarmup, double capture_limit_ms = 0);
  bool cuda_graphs() const { return graphs_ != nullptr; }
  /// Whether run(x, y) replays a captured graph.
  bool captured(const at::Tensor& x, const at::Tensor& y) const;
  /// The graphs' memory pool and side stream (null without graphs), for
  /// evaluation's graphs.
  std::shared_ptr<GraphPool> graph_pool() const;
  /// The peak GPU memory of the graphs' captures (GraphedFunction::peak_bytes;
  /// 0 without graphs): a peak measured over replays alone leaves it out.
  int64_t graph_peak_bytes() const;
  /// Eager steps of each shape before its capture.
  static constexpr int64_t kGraphWarmup = 3;

  /// From the next step on, roll the model out `steps` times per step (x: [B,
  /// t_in, *S], y: [B, steps, *S]; the loss summed over the steps); 0: one
  /// forward (the default). A rollout needs offload policy none and one
  /// micro-batch (forward_backward throws std::invalid_argument otherwise).
  void set_rollout(int64_t steps);
  int64_t rollout_steps() const { return rollout_steps_; }

  /// From the next step on, clip the gradients to a total 2-norm of `max_norm`
  /// before the optimizer steps (fno::clip_grad_norm_: after the sum over
  /// ranks and fp16's unscaling; under CUDA graphs inside them), and report the
  /// norm before clipping in StepResult::grad_norm. inf: report, never clip;
  /// 0: neither (the default). Before enable_cuda_graphs().
  void set_max_grad_norm(double max_norm);
  double max_grad_norm() const { return max_grad_norm_; }

 private:
  OffloadedStep& step_;
  torch::optim::Optimizer& optimizer_;
  StepLoss loss_;
  GradScaler* scaler_;
  dist::GradientSync* sync_ = nullptr;
  bool overlap_ = true;  // the sync's buckets start during backward
  int64_t rollout_steps_ = 0;
  double max_grad_norm_ = 0;
  std::vector<at::Tensor> params_;  // the optimizer's, for the scaler
  // Forward, loss (scaled in fp16) and backward, without zeroing the gradients.
  at::Tensor loss_and_backward(const at::Tensor& x, const at::Tensor& y);
  // The clipping (if on) and the optimizer's device step after the summed
  // gradients: {loss, then fp16's "taken" flag, then the gradient norm, each
  // where on}.
  std::vector<at::Tensor> device_update(at::Tensor loss);
  // The step a graph captures: device_update's outputs; with a gradient sync,
  // forward and backward up to the packed buckets: {loss}.
  std::vector<at::Tensor> graph_body(const std::vector<at::Tensor>& inputs);
  // With a gradient sync, the second graph: the summed gradients back, the
  // optimizer's step. {loss} -> device_update's outputs.
  std::vector<at::Tensor> update_body(const std::vector<at::Tensor>& inputs);
  // The arm() of the sync before the backward that completes the gradients
  // (eager steps), or none.
  void hook_sync(bool on);
  // Back to eager steps, the optimizer's step counts to the host.
  void disable_cuda_graphs();
  AdamW* adamw_ = nullptr;  // the optimizer's device step, under graphs
  std::unique_ptr<GraphedFunction> graphs_;
  std::unique_ptr<GraphedFunction> update_graphs_;  // several ranks: the second graph
};

}  // namespace fno
