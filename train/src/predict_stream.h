// Internal to predict(): prediction streamed tile by tile, for grids whose
// input or output does not fit the host budget or whose forward does not fit
// the GPU whole. The input's rows come from an HDF5 hyperslab reader per tile
// (of whichever input file holds the sample), the output's go to a chunked
// HDF5 dataset per tile, and the truth's rows (when asked for) are read per
// output tile to add up the sample's errors; the forward is the tiled step's
// (fno/tiled.h) with a TileSource and a TileSink, under the engine's streamed
// plan (fno_engine/forward_plan.h).
#pragma once

#include <fno/fno.h>
#include <fno/tiled.h>
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>
#include <fno_engine/forward_plan.h>
#include <fno_offload/offload.h>

#include "predict_inputs.h"
#include "stream_errors.h"
#include "stream_io.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace fno::detail {

/// Predicts samples [first, first + n) of `inputs` into dataset "pred" of
/// `writer` ((N, *S), or (N, C, *S) for several output channels), one sample
/// at a time under `plan`: the input normalized per tile, the output decoded
/// per tile and written as a band of rows. With `errors`, each output tile is
/// compared with the truth's same rows (read by hyperslab as it is written)
/// and each sample's relative L2 and H1 errors are appended to it, in order.
/// The input's and the truth's reads and the output's writes run on one I/O
/// thread beside the forward (stream_io.h); returns their seconds. `on_tile`
/// (when set) is told of each tile read from the input and each tile
/// written, with the sample's index in [0, n).
StreamTimes predict_streamed(FNO model, const StreamedPlan& plan, const InputFiles& inputs,
                             int64_t first, int64_t n, const torch::Device& device,
                             const data::UnitGaussianNormalizer& in_norm,
                             const data::UnitGaussianNormalizer& out_norm,
                             data::Hdf5SampleWriter& writer, offload::Offloader* offloader,
                             const std::function<void(int64_t sample)>& on_tile = {},
                             std::vector<StreamedErrors::Values>* errors = nullptr);

/// Rows [r0, r0 + rows) of a normalizer applied to a tile (a pointwise one's
/// statistics cut to the tile's rows). `inverse`: decode.
// x: [B, C, rows, *S'] -> [B, C, rows, *S']
torch::Tensor normalize_rows(const data::UnitGaussianNormalizer& norm, const torch::Tensor& x,
                             int64_t r0, bool inverse);

}  // namespace fno::detail
