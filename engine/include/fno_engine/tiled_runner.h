// Runs the tiled plans that offload auto and the forward planner choose
// (tiled_plan.h, forward_plan.h) for OffloadedStep and forward_under_plan:
// one TiledStep per plan (its host stores live across steps), micro-batches
// whose gradients add up, host stores on the offloader's copy engine.
#pragma once

#include <fno/tiled.h>
#include <fno_engine/tiled_plan.h>
#include <fno_offload/offload.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace fno {

class TiledRunner {
 public:
  using Loss = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  /// `offloader`: the copy engine of host stores (null or inactive: plans with
  /// host stores cannot run).
  TiledRunner(FNO model, offload::Offloader* offloader);

  /// One step of `choice` on (x, y): forward and backward of each micro-batch,
  /// its loss scaled by its share of the batch when `mean`; returns the summed
  /// loss, detached. `before_last` runs before the last micro-batch.
  // x: [B, Cin, *S], y: [B, Cout, *S]
  at::Tensor step(const TiledChoice& choice, const at::Tensor& x, const at::Tensor& y,
                  const Loss& loss, bool mean, const std::function<void()>& before_last = nullptr);

  /// One step of the whole band (set_band; no band: the whole grid) with every
  /// activation kept, in `micro_batches` as step's: the model's own forward
  /// under a BandGuard (fno/band.h), `loss`, backward. A tiled step's least
  /// compute, a plain step's memory. Returns the summed loss, detached.
  // x: [B, Cin, n, *S'], y: [B, Cout, n, *S']
  at::Tensor step_whole(const at::Tensor& x, const at::Tensor& y, const Loss& loss, bool mean,
                        int64_t micro_batches = 1,
                        const std::function<void()>& before_last = nullptr);

  /// model(x) in tiles of `plan`, without gradients, all of x's samples at
  /// once (forward_under_plan, fno_engine/forward_plan.h, runs micro-batches).
  // x: [B, Cin, *S] -> [B, Cout, *S]
  at::Tensor forward(const TiledPlan& plan, const at::Tensor& x);

  /// Drops every plan's stores (their pinned memory too).
  void clear() { steps_.clear(); }

  /// One sample across ranks (TiledStep::set_band): every plan's steps take
  /// this rank's band of rows, and `loss` must be a global one.
  void set_band(const Band& band);

 private:
  TiledStep& step_for(const TiledPlan& plan);
  FNO model_;
  offload::Offloader* offloader_;
  std::map<std::string, std::unique_ptr<TiledStep>> steps_;
  Band band_;
};

}  // namespace fno
