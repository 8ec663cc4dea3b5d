// Plans of the tiled step (fno/tiled.h) for a GPU memory budget, and the
// pinned host stores they stream through (offload/'s HostTiles).
//
// A plan is the tile size, where each block input and the gradient between
// blocks live (GPU, pinned host memory, or remade per tile), and the number of
// micro-batches. Its peak GPU memory, pinned host memory and time are
// estimated from the sizes of the step's tensors and a model of the link (both
// directions at once) against the compute; offload auto measures the best few
// and takes the fastest within the budget (engine/src/auto_search.cpp).
#pragma once

#include <fno/tiled.h>
#include <fno_offload/offload.h>
#include <fno_offload/planner.h>
#include <fno_offload/tiles.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fno {

/// A TileStore in pinned host memory, through `offloader`'s copy engine: its
/// copies count in the offloader's StepStats.
class PinnedTileStore final : public TileStore {
 public:
  PinnedTileStore(offload::Offloader& offloader, const std::string& name,
                  int64_t prefetch_tiles = 2)
      : tiles_(offloader, name, prefetch_tiles) {}
  void put(int64_t t, const at::Tensor& tile) override { tiles_.put(t, tile); }
  void put_held(int64_t t, const at::Tensor& tile) override { tiles_.put(t, tile, true); }
  at::Tensor get(int64_t t) override { return tiles_.get(t); }
  void expect(const std::vector<int64_t>& order) override { tiles_.expect(order); }
  bool expect_early(const std::vector<int64_t>& order, int64_t tiles) override {
    tiles_.expect(order, tiles);
    return true;
  }
  void clear() override { tiles_.clear(); }

 private:
  offload::HostTiles tiles_;
};

/// A tiled plan and its micro-batches, with what it is estimated to need.
struct TiledChoice {
  TiledPlan plan;
  int64_t micro_batches = 1;
  int64_t peak_bytes = 0;  // GPU memory, estimated (auto measures it)
  int64_t host_bytes = 0;  // pinned host memory
  double step_ms = 0;      // estimated: the model only ranks
  /// "tiled micro_batches=K; tile_rows=R, inputs=..., gradient=..., keep_latest=B"
  std::string to_string() const;
};
/// The inverse of TiledChoice::to_string; std::invalid_argument names what does not parse.
TiledChoice parse_tiled_choice(const std::string& text);
/// Whether `text` names a tiled plan (starts with "tiled ").
bool is_tiled_plan_text(const std::string& text);
/// A choice of a model of `layers` blocks as 4 + layers numbers (tile rows,
/// micro-batches, the gradient's place, keep_latest, each input's place or -1),
/// and back: what one rank's choice is when it travels to the others in an
/// all-reduce (the others send zeros).
std::vector<double> encode_tiled_choice(const TiledChoice& c, int64_t layers);
TiledChoice decode_tiled_choice(const std::vector<double>& v);

/// A fixed offload policy (offload.policy: not auto) as a tiled plan, for a
/// step split across ranks (OffloadedStep::set_band), which runs tiled. In a
/// tiled step each block's activations are remade per tile in backward, so
/// the full-size tensors a policy can place are the block inputs; each takes
/// the level of the stage that reads it (block.j's, offload/planner.h):
///   none, slim         block 0's input remade from the band's input (the
///                      lifting is cheap), the others on the GPU
///   all, recompute+offload   every block input in pinned host memory
///   blocks:K           the first K stages offloaded (the lifting counts as
///                      the first): blocks 0 .. K-2's inputs in pinned host
///                      memory, the others on the GPU
///   recompute          every block input remade per tile from the band's
///                      input (checkpointing's trade: the least GPU memory)
/// `chunks` (offload.chunks, batch chunks of every stage) become tiles of
/// ceil(rows / chunks) rows (none: one tile); `micro_batches` (at most
/// `batch`) stay. `rows`: the largest band's rows, so that every rank takes
/// the same choice. Without `host` (no CUDA: nothing moves) pinned host
/// memory becomes the GPU's (the compute device's). The gradient between
/// blocks stays on the device. Throws std::invalid_argument for auto.
TiledChoice tiled_choice_for_policy(const offload::Policy& policy, int64_t layers, int64_t rows,
                                    int64_t chunks, int64_t micro_batches, int64_t batch,
                                    bool host);

/// What the estimates take from outside the step.
struct TiledContext {
  int64_t base_bytes = 0;  // GPU memory held before the step (weights, optimizer, the batch)
  int64_t grad_bytes = 0;  // the parameter gradients the step makes
  int64_t window = int64_t{1} << 30;  // device-to-host bytes in flight (OffloadOptions)
  bool compress = false;              // bf16 host storage of fp32 tensors
  bool can_split = true;              // the loss adds over batch entries: micro-batches allowed
  double link_gbps = 50;              // each direction
};

/// The estimate of one choice for a batch of `x_shape` ([B, Cin, *S]).
TiledChoice estimate_tiled(FNO model, at::IntArrayRef x_shape, TiledPlan plan,
                           int64_t micro_batches, const TiledContext& context);

/// Tiled plans for a batch of `x_shape` estimated within `budget` GPU bytes
/// and `host_limit` pinned bytes (0: no limit), fastest estimate first; at
/// most `count`, of distinct placements. Empty when the model cannot run tiled.
std::vector<TiledChoice> tiled_candidates(FNO model, at::IntArrayRef x_shape, int64_t budget,
                                          int64_t host_limit, const TiledContext& context,
                                          size_t count = 4);

/// Pinned host memory a step may take: `limit` when > 0 (offload.host_memory_limit),
/// else three quarters of the memory the host has available (MemAvailable),
/// so that pinning never pushes the machine into swap.
int64_t pinnable_host_bytes(int64_t limit);

/// The least GPU memory of any tiled plan of this batch (its choice), for
/// refusals that name what would fit.
TiledChoice least_memory_tiled(FNO model, at::IntArrayRef x_shape, const TiledContext& context);

}  // namespace fno
