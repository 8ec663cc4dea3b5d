// One FNO training step (forward, loss, backward) under an offload policy:
// the bridge between the model, offload/'s stages and planner, and the
// programs (fno_train, fno_bench). With policy "none" it is the plain step.
#pragma once

#include <fno/fno.h>
#include <fno_offload/offload.h>
#include <fno_offload/planner.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fno {

struct OffloadSettings {
  /// none | all | blocks:K | recompute | recompute+offload | auto
  std::string policy = "none";
  /// Budget for auto, in bytes; 0: the device's free memory.
  int64_t gpu_memory_limit = 0;
  /// Batch chunks of every stage for the fixed policies (auto picks its own).
  int64_t chunks = 1;
  offload::OffloadOptions options;
};

class OffloadedStep {
 public:
  OffloadedStep(FNO model, OffloadSettings settings);
  ~OffloadedStep();

  /// loss(model(x)).backward(); returns the loss (not detached from nothing: a
  /// 0-d tensor without grad). The first call for a new input shape makes the
  /// plan (for auto: profiles one batch entry, then plans for the budget).
  // x: [B, Cin, *S]
  at::Tensor forward_backward(const at::Tensor& x,
                              const std::function<at::Tensor(const at::Tensor&)>& loss);

  bool offloading() const;
  /// The plan, "stage=level[/chunks], ...", and its estimate (when profiled).
  std::string plan_text() const;
  std::string describe() const;
  /// Statistics of the last step (empty with policy none).
  const offload::StepStats& last_stats() const;
  /// The profile and estimate behind an auto plan (empty otherwise).
  const offload::Profile& profile() const;
  const offload::Estimate& estimate() const;
  /// Record the next step's memory timeline (in last_stats().timeline).
  void record_next_timeline();
  /// After a CUDA out-of-memory error in forward_backward(x, ...): one line of
  /// advice (estimated need, and the policy that would fit) from a profile of
  /// one batch entry; gradients are dropped and the allocator's cache emptied first.
  std::string out_of_memory_advice(const at::Tensor& x);

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

/// Peak GPU memory estimates of the fixed policies and of auto for one batch of
/// `x`'s shape, from a profile of one batch entry; one line per policy.
std::string estimate_policies(FNO model, const at::Tensor& x, const OffloadSettings& settings);

}  // namespace fno
