// A forward under a plan: model(x) without gradients within a memory budget,
// for evaluation (OffloadedStep::forward) and prediction (fno_predict).
//
// The planner chooses, for an input's shape and a budget:
//   - held in memory (ForwardPlan): the whole grid in micro-batches of the
//     largest size whose estimated forward fits, else tiles of rows
//     (fno/tiled.h) with block inputs on the device or remade, one sample at a
//     time;
//   - streamed (StreamedPlan): one sample at a time in tiles whose input rows
//     come from a TileSource and whose output rows go to a TileSink, the block
//     inputs' place and the tiles' rows chosen within the GPU and host budgets.
// forward_under_plan() is the one path that runs a ForwardPlan; a whole-grid
// plan may replay its micro-batches as CUDA graphs (forward_graphs.h).
//
// Budgets that cannot hold the least plan are refused with a ForwardBudgetError:
// one line in neutral words (the limit, the floor), which the programs reword
// with their own flag or key (ForwardBudgetError::detail).
#pragma once

#include <fno/fno.h>
#include <fno/tiled.h>
#include <fno_engine/tiled_plan.h>
#include <fno_offload/offload.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace fno {

class TiledRunner;
class ForwardGraphs;

/// The memory a forward may take.
struct ForwardBudget {
  /// GPU bytes (0: none; a plan on a GPU then takes the whole grid at once).
  /// Applies on a CUDA device only.
  TORCH_ARG(int64_t, gpu_memory_limit) = 0;
  /// Host bytes of the data a streamed forward holds (0: none).
  TORCH_ARG(int64_t, host_memory_limit) = 0;
  /// Tiles of this many rows of the first spatial dim, forced (0: the plan's).
  TORCH_ARG(int64_t, tile_rows) = 0;
};

/// A budget no plan fits, or a forced tiling the model cannot run. what() is
/// one neutral line ("GPU memory limit 1.00 GiB is under the floor: ...");
/// detail() is the same without the limit's name, for a caller to prefix with
/// its flag ("--gpu-memory-limit " + detail()).
class ForwardBudgetError : public std::runtime_error {
 public:
  enum class Limit { kGpuMemory, kHostMemory, kTileRows };
  ForwardBudgetError(Limit limit, const std::string& detail);
  Limit limit() const { return limit_; }
  /// "1.00 GiB is under the floor: ..." (kTileRows: "this model cannot run in tiles: ...").
  const std::string& detail() const { return detail_; }
  /// "GPU memory limit", "host memory limit", "forced tile rows".
  static const char* name(Limit limit);

 private:
  Limit limit_;
  std::string detail_;
};

/// The plan of a forward held in memory: `micro` samples at a time, each the
/// whole grid, or the tiles of `tiled->plan`.
struct ForwardPlan {
  int64_t micro = 1;
  std::optional<TiledChoice> tiled;
  /// The whole-grid micro-batches replayed as CUDA graphs (use_forward_graphs,
  /// forward_graphs.h); choose_forward_plan leaves it false.
  bool graphed = false;
  std::string text;  // one line
};

/// Estimated GPU bytes of a whole-grid forward without gradients for `b`
/// samples of x_shape ([B, Cin, *S]), in elements of `elem` bytes: the
/// weights, the input and output, and a few hidden-size tensors at once.
int64_t whole_grid_forward_bytes(FNO model, at::IntArrayRef x_shape, int64_t b, int64_t elem);

/// The plan for a batch of x_shape ([B, Cin, *S]) on `device`, in elements of
/// `elem` bytes (the compute dtype's): forced tiles (budget.tile_rows); on the
/// CPU or without a GPU limit the whole grid, B at once; else the largest
/// micro-batch (B halved) whose estimated forward fits, else the largest tiles
/// of one sample that fit, with the latest block input kept on the device or
/// each remade per tile (a forward's own estimate: no gradient, no block input
/// stored). Throws ForwardBudgetError
/// below the floor or for tiles the model cannot run.
ForwardPlan choose_forward_plan(FNO model, at::IntArrayRef x_shape, const ForwardBudget& budget,
                                const torch::Device& device, int64_t elem);

/// The one forward under a plan: model(x) without gradients, plan.micro
/// samples at a time, each the whole grid or in plan.tiled's tiles through
/// `tiles` (its tiled steps, and their pinned stores, live across calls; it
/// may be null when the plan has no tiles); a graphed plan's whole-grid
/// micro-batches through `graphs` (its CUDA graphs live across calls; it may
/// be null when the plan is not graphed).
// x: [B, Cin, *S] -> [B, Cout, *S]
at::Tensor forward_under_plan(FNO model, const ForwardPlan& plan, const at::Tensor& x,
                              TiledRunner* tiles, ForwardGraphs* graphs = nullptr);

/// Where a streamed forward keeps what, and what it is estimated to need.
struct StreamedPlan {
  TiledPlan plan;
  bool keep_input = false;  // the input kept in host memory after its first read
  int64_t host_bytes = 0;   // estimated host bytes of the data the run holds
  int64_t gpu_bytes = 0;    // estimated device bytes (CUDA), 0 on the CPU
  std::string text;         // one line
};

/// Chooses the tiles of a streamed forward of one sample of `one_shape`
/// ([1, Cin, *S]) and the block inputs' places: the latest on the device when
/// it fits the GPU budget (the host budget on the CPU), else remade from the
/// model input per tile; the input is kept in host memory when the host
/// budget allows. `io_bytes`: host bytes the source and sink hold beside their
/// tiles (chunk caches). Throws ForwardBudgetError (the limit, the floor) when
/// neither budget holds the least plan, std::runtime_error when the model
/// cannot run in tiles.
StreamedPlan choose_streamed_plan(FNO model, at::IntArrayRef one_shape, const ForwardBudget& budget,
                                  const torch::Device& device, int64_t io_bytes);

/// The tiled step of a streamed forward under `plan`: step->forward(source,
/// sink). Host stores (TilePlace::kHost) go through `offloader`'s copy engine
/// (null or inactive: the plan may not use them).
std::unique_ptr<TiledStep> streamed_step(FNO model, const TiledPlan& plan,
                                         offload::Offloader* offloader);

}  // namespace fno
