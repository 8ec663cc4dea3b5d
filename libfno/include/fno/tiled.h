// An FNO's training step in spatial tiles: activation memory of O(tile) +
// O(modes), whatever the grid.
//
// An FNO block is pointwise but for its spectral convolution, and that keeps
// only the low modes. So a block runs over tiles of rows of the first spatial
// dim: one sweep over the tiles of its input sums each tile's share of the
// kept spectrum (a truncated DFT of the tile), the channel mixing acts on the
// small spectrum, and the next sweep makes each tile of the block's output
// from its input tile and the mixed spectrum (the inverse transform restricted
// to the tile's rows), fused with the pointwise tail. Lifting and projection
// are pointwise. The adjoint of a truncated DFT is a truncated DFT, so
// backward has the same structure, sweeping the blocks in reverse.
//
// A step is n_layers + 1 forward sweeps and n_layers + 1 backward sweeps. The
// only full-size tensors are the blocks' inputs (post-activation, a_1 ..
// a_{n-1}; a_0 is the lifting's output) and, in backward, the gradient
// flowing between blocks. Each lives where the plan puts it: on the GPU, in a
// TileStore the caller provides (pinned host memory, streamed tile by tile:
// offload/), or nowhere, recomputed for each tile from the nearest kept one
// (from the input for a_0: the lifting is cheap). Once a step's spectra are
// known, any activation of a tile can be remade from that tile alone.
//
// Numerics: the same functions as the whole-grid model (the fused block tail
// included), summed over tiles; gradients equal the whole-grid step's to
// fp32 rounding. 2D and 3D models; not 1D, not with domain padding.
//
// Across ranks (set_band): each rank holds a band of rows, sums its tiles'
// share of each spectrum, and the spectra are added over the ranks.
#pragma once

#include <fno/band.h>
#include <fno/fno.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fno {

/// Where a full-size tensor of a tiled step lives between sweeps.
enum class TilePlace {
  kDevice,    // on the GPU (the compute device), tile by tile
  kHost,      // in a TileStore of the caller's (pinned host memory)
  kRecompute  // nowhere: remade per tile (block inputs only)
};
std::string to_string(TilePlace place);
/// "device" | "host" | "recompute"; throws std::invalid_argument naming the text.
TilePlace parse_tile_place(const std::string& text);

/// Tiles of one full-size tensor [B, C, *S]: tile t holds rows
/// [t * rows, min((t + 1) * rows, S0)) of the first spatial dim, [B, C, rows_t, *S'].
class TileStore {
 public:
  virtual ~TileStore() = default;
  /// Keeps tile t (a tensor on the compute device, which the caller may drop
  /// at once); replaces what tile t held.
  virtual void put(int64_t t, const at::Tensor& tile) = 0;
  /// As put, when the caller keeps `tile` itself until the next sweep has
  /// read it: a store may copy it out without holding the caller back, since
  /// the copy costs no memory the caller does not hold anyway.
  virtual void put_held(int64_t t, const at::Tensor& tile) { put(t, tile); }
  /// Tile t on the compute device, usable on the current stream.
  virtual at::Tensor get(int64_t t) = 0;
  /// The tiles the next gets will read, in order (a store may fetch them ahead).
  virtual void expect(const std::vector<int64_t>& order) { (void)order; }
  /// As expect, a sweep early: at most `tiles` of them may come to the device
  /// before the first get. Returns whether the store took it (false: the
  /// caller announces the reads with expect when they start).
  virtual bool expect_early(const std::vector<int64_t>& order, int64_t tiles) {
    (void)order;
    (void)tiles;
    return false;
  }
  /// Drops every tile.
  virtual void clear() = 0;
};

/// Makes the host stores of a step (TilePlace::kHost), e.g. offload/'s pinned
/// streams. `name` says what it holds ("block.2 input", "gradient").
using TileStoreFactory = std::function<std::unique_ptr<TileStore>(const std::string& name)>;

struct TiledPlan {
  /// Rows of the first spatial dim per tile (the last tile may be shorter).
  int64_t tile_rows = 64;
  /// Where block i's input lives (i = 0 .. n_layers-1; a_0 is the lifting's
  /// output). Empty: a_0 recomputed, the others on the device.
  std::vector<TilePlace> inputs;
  /// Where the gradient between blocks lives in backward: kDevice or kHost.
  TilePlace gradient = TilePlace::kDevice;
  /// Forward keeps the block input it has just made on the device until the
  /// next sweep has read it (one full-size tensor), instead of reading it
  /// back from its place; in training the last block's input stays on until
  /// backward's first sweep has read it, and is never stored (its place in
  /// `inputs` is unused).
  bool keep_latest = true;
  /// "tile_rows=R, inputs=recompute/host/..., gradient=device, keep_latest=1"
  std::string to_string() const;
};
/// The inverse of TiledPlan::to_string; throws std::invalid_argument naming
/// what does not parse.
TiledPlan parse_tiled_plan(const std::string& text);

/// The model input of a streamed forward (TiledStep::forward(TileSource,
/// TileSink)), given row band by row band instead of whole: e.g. read from a
/// file per tile, so that neither the device nor the host holds all of it.
struct TileSource {
  /// The whole input's shape, [B, Cin, *S].
  std::vector<int64_t> shape;
  /// The tiles' device and dtype (the compute device; the activations take
  /// this dtype where the model's compute type is float32).
  at::TensorOptions options;
  /// Rows [r0, r0 + rows) of the first spatial dim: [B, Cin, rows, *S'] on
  /// `options`' device. Called for each tile, in order, in the lifting's
  /// sweep, and again in each sweep whose block input is remade from the
  /// model input (TilePlace::kRecompute below every kept input).
  std::function<at::Tensor(int64_t r0, int64_t rows)> rows;
};

/// Takes the output's rows [r0, r0 + rows): tile [B, Cout, rows, *S'] in the
/// parameters' type, on the compute device. Called once per tile, in order.
using TileSink = std::function<void(int64_t r0, const at::Tensor& tile)>;

/// Full-size bytes of the step's tensors for a batch of `x_shape`
/// ([B, Cin, *S]): one block input (or the gradient), the model's output.
struct TiledSizes {
  int64_t hidden = 0;                       // one block input / the gradient
  int64_t output = 0;                       // [B, Cout, *S] in the parameters' type
  int64_t tile_hidden(int64_t rows) const;  // one tile of a block input
  int64_t rows = 0;                         // S0
};
TiledSizes tiled_sizes(FNO model, at::IntArrayRef x_shape);

/// Why `model` cannot run tiled, or "" when it can (2D/3D, no domain padding,
/// two-layer channel MLPs).
std::string tiled_unsupported(FNO model);

class TiledStep {
 public:
  /// `host`: the factory for TilePlace::kHost (null: the plan may not use it).
  TiledStep(FNO model, TiledPlan plan, TileStoreFactory host = nullptr);
  ~TiledStep();
  TiledStep(const TiledStep&) = delete;
  TiledStep& operator=(const TiledStep&) = delete;

  /// loss(model(x), y).backward() over tiles; parameter gradients accumulate
  /// into their .grad. `loss` maps the whole output [B, Cout, *S] (made tile
  /// by tile, then kept: it has Cout channels) and y to a scalar. Returns the
  /// loss, detached.
  // x: [B, Cin, *S], y: [B, Cout, *S]
  at::Tensor forward_backward(
      const at::Tensor& x, const at::Tensor& y,
      const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss);

  /// model(x) over tiles, without gradients (evaluation): no block input is
  /// kept, only the latest (keep_latest) or none (each tile's input remade).
  // x: [B, Cin, *S] -> [B, Cout, *S]
  at::Tensor forward(const at::Tensor& x);

  /// model(x) over tiles, without gradients, streamed: the input's tiles come
  /// from `x` when a sweep needs them, and each tile of the output goes to
  /// `out` as soon as it is made; nothing of full size is held but the block
  /// inputs the plan keeps. Equal to forward(x) on the same values.
  // x: rows of [B, Cin, *S] -> out(r0, [B, Cout, rows, *S']) per tile
  void forward(const TileSource& x, const TileSink& out);

  const TiledPlan& plan() const;

  /// One sample across ranks (fno/band.h): the inputs of later steps hold
  /// rows [band.row0, band.row0 + n) of a grid of band.grid_rows rows (the
  /// DFT phases and grid coordinates use the global row), and the partial
  /// spectra (forward) and the mixings' input gradients (backward), [B, C,
  /// *K] complex, are added over the ranks with band.sum. Outputs are the
  /// band's rows; parameter gradients are this band's share, for the caller
  /// to add over the ranks; `loss` must be a global one (band_rel_loss).
  void set_band(Band band);
  const Band& band() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace fno
