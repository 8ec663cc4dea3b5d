// Internal to predict(): its plans (held in memory: whole grid, micro-batches or
// tiles; streamed), and prediction streamed tile by tile, for grids whose
// input or output does not fit the host budget or whose forward does not fit
// the GPU whole. The input's rows come from an HDF5 hyperslab reader per tile,
// the output's go to a chunked HDF5 dataset per tile; the forward is the tiled
// step's (fno/tiled.h) with a TileSource and a TileSink.
#pragma once

#include <fno/fno.h>
#include <fno/tiled.h>
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>
#include <fno_engine/tiled_plan.h>
#include <fno_offload/offload.h>
#include <fno_train/predict.h>

#include "stream_io.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fno::detail {

/// The forward's plan of a prediction held in memory: whole grid in
/// micro-batches of `micro` samples, or tiles.
struct Plan {
  int64_t micro = 1;
  std::optional<TiledChoice> tiled;
  std::string text;
};

/// Estimated GPU bytes of a whole-grid forward without gradients for `b`
/// samples of x_shape, in elements of `elem` bytes.
int64_t whole_grid_bytes(FNO model, at::IntArrayRef x_shape, int64_t b, int64_t elem);

/// The plan for `batch` samples of x_shape on `device` within o's GPU limit
/// (tiles when one sample's whole grid is over it; refused below the floor).
Plan choose_plan(FNO model, at::IntArrayRef x_shape, int64_t batch, const PredictOptions& o,
                 const torch::Device& device, int64_t elem);

/// Where a streamed prediction keeps what, and what it is estimated to need.
struct StreamPlan {
  TiledPlan plan;
  bool keep_input = false;  // the input kept in host memory after its first read
  int64_t host_bytes = 0;   // estimated host bytes of the data the run holds
  int64_t gpu_bytes = 0;    // estimated device bytes (CUDA), 0 on the CPU
  std::string text;         // one line
};

struct StreamRequest {
  std::vector<int64_t> x_shape;  // one sample's [1, Cin, *S]
  torch::Device device = torch::kCPU;
  int64_t gpu_memory_limit = 0;   // 0: the device's free memory
  int64_t host_memory_limit = 0;  // 0: none
  int64_t tile_rows = 0;          // forced (0: the plan's)
  int64_t reader_cache = 0;       // the input reader's chunk cache
};

/// Chooses the tiles and the block inputs' places: on the device when they fit
/// the GPU budget (the host budget on the CPU), else in pinned host memory when
/// the host budget allows (CUDA), else remade from the model input. Throws
/// std::runtime_error (one line naming the limit and the floor) when neither
/// budget can hold the least plan.
StreamPlan choose_stream_plan(FNO model, const StreamRequest& request);

/// The model's forward under `plan`, streamed: step->forward(source, sink)
/// takes the input's rows from a TileSource and gives each output tile to a
/// TileSink. Host stores (TilePlace::kHost) go through `offloader`'s copy
/// engine (null or inactive: the plan may not use them).
std::unique_ptr<TiledStep> plan_step(FNO model, const TiledPlan& plan,
                                     offload::Offloader* offloader);

/// Predicts samples [first, first + n) of `reader`'s array into dataset
/// "pred" of `writer` ((N, *S), or (N, C, *S) for several output channels),
/// one sample at a time under `plan`: the input normalized per tile, the
/// output decoded per tile and written as a band of rows. The input's reads
/// and the output's writes run on one I/O thread beside the forward
/// (stream_io.h); returns their seconds. `on_tile` (when set) is told of each
/// tile read from the input and each tile written, with the sample's index in
/// [0, n).
StreamTimes predict_streamed(FNO model, const StreamPlan& plan,
                             const data::Hdf5SlabReader& reader, int64_t first, int64_t n,
                             const torch::Device& device,
                             const data::UnitGaussianNormalizer& in_norm,
                             const data::UnitGaussianNormalizer& out_norm,
                             data::Hdf5SampleWriter& writer, offload::Offloader* offloader,
                             const std::function<void(int64_t sample)>& on_tile = {});

/// Rows [r0, r0 + rows) of a normalizer applied to a tile (a pointwise one's
/// statistics cut to the tile's rows). `inverse`: decode.
// x: [B, C, rows, *S'] -> [B, C, rows, *S']
torch::Tensor normalize_rows(const data::UnitGaussianNormalizer& norm, const torch::Tensor& x,
                             int64_t r0, bool inverse);

}  // namespace fno::detail
