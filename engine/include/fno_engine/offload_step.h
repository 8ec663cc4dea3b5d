// One FNO training step (forward, loss, backward) under an offload policy:
// the bridge between the model, offload/'s stages and planner, and the
// programs (fno_train, fno_bench). With policy "none" it is the plain step.
#pragma once

#include <fno/band.h>
#include <fno/fno.h>
#include <fno_engine/forward_plan.h>
#include <fno_offload/offload.h>
#include <fno_offload/planner.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fno {

// offload.gpu_memory_limit (fno_bench --gpu-memory-limit) is the GPU memory,
// in bytes, that a run may take; 0 means that none was given. The quantities
// drawn from it fall back to different figures of the device without one, so
// each has its function here, and every use goes through one of them. They
// read the current CUDA device (0 without CUDA).

/// The budget auto plans for (and estimate_policies reports): the limit, else
/// the device's free memory plus what the caching allocator holds unused
/// (offload::device_free_bytes).
int64_t resolve_gpu_budget(int64_t limit);
/// The ceiling of a learning back-pressure window (OffloadSettings::learn_inflight):
/// the limit, else 90% of what this process can have: what it holds now plus
/// what the device still gives.
int64_t inflight_memory_ceiling(int64_t limit);
/// The memory a step that ran out of it had (out_of_memory_advice): the limit,
/// else the device's total memory.
int64_t oom_capacity(int64_t limit);
/// fno_train keeps the run's data on the GPU when it takes less than this: an
/// eighth of the limit (the data count in the budget), else a quarter of
/// `device_total`, the training device's memory.
int64_t resident_data_room(int64_t limit, int64_t device_total);

struct OffloadSettings {
  /// The policy (offload/planner.h); its text names it in messages.
  offload::Policy policy;
  /// offload.gpu_memory_limit: auto's budget in bytes; 0: none (resolve_gpu_budget).
  int64_t gpu_memory_limit = 0;
  /// Batch chunks of every stage for the fixed policies (auto picks its own).
  int64_t chunks = 1;
  /// The fixed policies run each step as this many micro-batches whose
  /// gradients add up (at most the batch; auto picks its own). Needs the
  /// forward_backward overload with targets.
  int64_t micro_batches = 1;
  offload::OffloadOptions options;
  /// The fixed policies: the back-pressure window (options.max_inflight_bytes)
  /// learns from the steps' waits (OffloadOptions::inflight_memory_limit), within
  /// inflight_memory_ceiling(gpu_memory_limit). auto keeps the window its plan
  /// was measured with.
  bool learn_inflight = false;
  /// auto: the chosen plan is written here (a run directory's offload_plan.txt)
  /// and read back first when it holds the same key (--resume). "": not kept.
  std::string plan_file;
  /// auto: a directory of chosen plans, one file per key (model, input shape and
  /// dtype, budget, device, offload options); a later run with the same key
  /// reuses the plan instead of searching. "": no cache.
  std::string plan_cache_dir;
  /// auto: seconds the measured search may take (its profile included;
  /// fno_engine/search_cap.h). Before a trial estimated to end after them it
  /// stops and takes the fastest plan measured, or, none measured, the fastest
  /// estimated to fit; the plan's text says so. Infinity: no cap; 0: no trial.
  /// A cut search's plan is not kept in plan_cache_dir (a later run searches again).
  double search_seconds = 60;
};

/// The default plan cache: $FNO_PLAN_CACHE, else $XDG_CACHE_HOME/fno/plans,
/// else $HOME/.cache/fno/plans ("" when none of them is set).
std::string default_plan_cache_dir();

/// What would fit a step that ran out of GPU memory, as data
/// (OffloadedStep::out_of_memory_advice); the programs word it in their flags.
struct StepMemoryAdvice {
  int64_t batch = 0;
  /// One batch entry was measured whole; `fixed` then holds the fixed
  /// policies' estimates (fixed.capacity is set either way).
  bool profiled = false;
  offload::MemoryAdvice fixed;
  /// Where no fixed policy fits: auto's whole-grid plan with this many
  /// micro-batches fits (0: none does), with its estimate ...
  int64_t auto_micro_batches = 0;
  offload::Estimate auto_estimate;
  /// ... else auto's spatial tiles fit, with this peak and pinned host memory.
  bool auto_tiles = false;
  int64_t tiles_peak = 0;
  int64_t tiles_host = 0;
};

class OffloadedStep {
 public:
  OffloadedStep(FNO model, OffloadSettings settings);
  ~OffloadedStep();

  /// loss(model(x)).backward(); returns the loss (not detached from nothing: a
  /// 0-d tensor without grad). The first call for a new input shape makes the
  /// plan (for auto: a cached plan for the same key, or a profile of one batch
  /// entry, the model's ranking of plans and a few measured steps). Throws
  /// offload::BudgetError when auto finds no plan within the budget.
  // x: [B, Cin, *S]
  at::Tensor forward_backward(const at::Tensor& x,
                              const std::function<at::Tensor(const at::Tensor&)>& loss);
  /// The same with the targets, for a loss(out, y) that adds over batch entries
  /// (or averages them: `mean`), as LpLoss and H1Loss do: auto may then also run
  /// the step as micro-batches whose gradients add up (Plan::micro_batches).
  // x: [B, Cin, *S], y: [B, Cout, *S]
  at::Tensor forward_backward(
      const at::Tensor& x, const at::Tensor& y,
      const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss,
      bool mean = false);

  /// The model's forward with gradients, as a step whose forward calls the
  /// model several times (a rollout) passes it to its loss.
  // x: [B, Cin, *S] -> [B, Cout, *S]
  using ModelForward = std::function<at::Tensor(const at::Tensor&)>;
  /// loss(model, x, y).backward() for a step that calls the model several
  /// times (fno_engine/rollout.h), in one piece: policy none and one
  /// micro-batch only (std::invalid_argument naming the policy otherwise).
  /// On a split band (set_band) each of the model's forwards runs on the
  /// band's rows with activations kept, and `loss` must be a global one.
  /// No memory timeline is recorded for it. Returns the loss, detached.
  // x: [B, Cin, *S], y: [B, ...]
  at::Tensor forward_backward_composite(
      const at::Tensor& x, const at::Tensor& y,
      const std::function<at::Tensor(const ModelForward& model, const at::Tensor& x,
                                     const at::Tensor& y)>& loss);

  /// model(x) without gradients under forward_plan(x), for evaluation and
  /// predictions: forward_under_plan (fno_engine/forward_plan.h), the one
  /// forward under a plan that fno_predict runs too.
  // x: [B, Cin, *S] -> [B, Cout, *S]
  at::Tensor forward(const at::Tensor& x);
  /// The plan forward(x) runs under, so that the whole run keeps the budget:
  ///   - at the grid of the training plan: that plan's (a tiled plan runs in
  ///     its tiles, and no more batch entries run at once than a training
  ///     micro-batch holds);
  ///   - else on the CPU, or with policy none and no gpu_memory_limit: the
  ///     whole grid, all of x at once;
  ///   - at another grid on a GPU (a test set at another resolution, or
  ///     before the first step): choose_forward_plan for x's shape within
  ///     what the run leaves of gpu_memory_limit (else of the device's free
  ///     memory), made once per shape. Throws ForwardBudgetError when not even
  ///     tiles of one sample fit.
  ForwardPlan forward_plan(const at::Tensor& x);

  /// One sample across ranks (fno/band.h): from now on each step and forward
  /// takes this rank's band of rows of a grid of band.grid_rows rows, and a
  /// step's loss must be a global one (band_rel_loss) over (output, target).
  /// A band's step is one of two, the same on every rank of the sample:
  ///   - the whole band with activations kept (TiledRunner::step_whole: the
  ///     model's own forward under a BandGuard, the loss, backward; the
  ///     configured micro-batches): policy none; auto without CUDA; auto on
  ///     a GPU when rank 0 estimates it to fit the budget: the planner's
  ///     estimate of a plain step from a profile of one batch entry of band
  ///     0 (the largest) with everything kept, within 98% of the budget (the
  ///     planner puts a plain step's peak over its measured one, not under);
  ///   - a tiled plan (TiledRunner::set_band: block inputs kept, each block's
  ///     tail remade per tile in backward): the other fixed policies
  ///     (tiled_choice_for_policy, fno_engine/tiled_plan.h; the configured
  ///     chunks and micro-batches; without CUDA nothing goes to host memory),
  ///     and auto on a GPU when the whole band does not fit: the fastest
  ///     estimated tiled plan of band 0's rows within the budget.
  /// Rank 0's choice travels to every rank through band.sum. Rank 0 says a
  /// policy's plan on stderr (not none's). A forward runs the training plan's
  /// tiles at its grid, else (and after a whole-band step) the band in one
  /// tile, all of x at once, or as many samples as a training micro-batch
  /// holds at the training grid; a forward off the training grid needs the
  /// band of that grid set first. CUDA graphs refuse a split
  /// band (std::invalid_argument). A band of one rank: whole-grid steps again.
  void set_band(Band band);
  const Band& band() const;

  /// Called just before the backward pass that completes a step's gradients
  /// (the last micro-batch's) with a key naming the input shape and the plan;
  /// the plan search's trial steps do not call it. For dist::GradientSync::arm.
  void set_before_final_backward(std::function<void(const std::string& key)> fn);

  const OffloadSettings& settings() const;
  bool offloading() const;
  /// Policy none with one micro-batch: a step is the model's forward, the
  /// loss and backward, nothing else (what a CUDA graph can capture).
  bool plain() const;
  /// The plan, "stage=level[/chunks], ...", and its estimate (when profiled).
  std::string plan_text() const;
  std::string describe() const;
  /// Statistics of the last step (empty with policy none).
  const offload::StepStats& last_stats() const;
  /// The profile and estimate behind an auto plan (empty otherwise).
  const offload::Profile& profile() const;
  const offload::Estimate& estimate() const;
  /// auto: seconds the last plan search took (0 when a cached plan was used).
  double plan_seconds() const;
  /// Record the next step's memory timeline (in last_stats().timeline).
  void record_next_timeline();
  /// Whether the next step records its memory timeline (a CUDA graph's replay would not).
  bool timeline_requested() const;
  /// After a CUDA out-of-memory error in forward_backward(x, ...): what would
  /// fit (estimated need, the fixed policy or auto's plan that would), from a
  /// profile of one batch entry; gradients are dropped and the allocator's
  /// cache emptied first.
  StepMemoryAdvice out_of_memory_advice(const at::Tensor& x);

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

/// Peak GPU memory estimates of the fixed policies and of auto for one batch of
/// `x`'s shape, from a profile of one batch entry; one line per policy.
std::string estimate_policies(FNO model, const at::Tensor& x, const OffloadSettings& settings);

}  // namespace fno
