#include "predict_stream.h"

#include "stream_io.h"

#include <torch/torch.h>

namespace fno::detail {

StreamTimes predict_streamed(FNO model, const StreamedPlan& plan, const data::Hdf5SlabReader& reader,
                             int64_t first, int64_t n, const torch::Device& device,
                             const data::UnitGaussianNormalizer& in_norm,
                             const data::UnitGaussianNormalizer& out_norm,
                             data::Hdf5SampleWriter& writer, offload::Offloader* offloader,
                             const std::function<void(int64_t sample)>& on_tile) {
  torch::NoGradGuard no_grad;
  const bool channels = model->options.out_channels() > 1;
  // One step for all samples: its host stores keep their pinned memory.
  const auto step = streamed_step(model, plan.plan, offloader);
  StreamTimes times;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = first + i;
    TileSource x;
    x.shape = reader.shape();
    x.shape[0] = 1;
    x.options = torch::TensorOptions().device(device).dtype(torch::kFloat);
    // The input kept (plan.keep_input): [1, Cin, *S] on the host, filled by
    // the first sweep. Only the I/O thread touches it.
    torch::Tensor kept;
    int64_t kept_rows = 0;
    if (plan.keep_input) kept = torch::empty(x.shape, torch::kFloat);
    auto read = [&, s](int64_t r0, int64_t rows) {
      if (kept.defined() && r0 + rows <= kept_rows) return kept.narrow(2, r0, rows);
      auto tile = reader.read(s, s + 1, r0, r0 + rows);
      if (kept.defined() && r0 == kept_rows) {
        kept.narrow(2, r0, rows).copy_(tile);
        kept_rows = r0 + rows;
      }
      return tile;
    };
    // tile: [1, Cout, rows, *S'] decoded, on the host -> the file's rows [r0, r0 + rows)
    auto write = [&, s](int64_t r0, const at::Tensor& tile) {
      if (channels) {
        writer.write_rows("pred", s - first, 2, r0, tile);
      } else {
        writer.write_rows("pred", s - first, 1, r0, tile.squeeze(1));
      }
    };
    StreamIo io(read, write, x.shape[2], device.is_cuda());
    x.rows = [&](int64_t r0, int64_t rows) {
      const auto tile = io.rows(r0, rows).to(device, /*non_blocking=*/true);
      return normalize_rows(in_norm, tile, r0, /*inverse=*/false);
    };
    TileSink out = [&](int64_t r0, const at::Tensor& tile) {
      io.put(r0, normalize_rows(out_norm, tile.to(torch::kFloat), r0, /*inverse=*/true));
    };
    if (on_tile) {  // (progress: each tile read and each tile written)
      x.rows = [rows = std::move(x.rows), &on_tile, i](int64_t r0, int64_t k) {
        auto tile = rows(r0, k);
        on_tile(i);
        return tile;
      };
      out = [sink = std::move(out), &on_tile, i](int64_t r0, const at::Tensor& tile) {
        sink(r0, tile);
        on_tile(i);
      };
    }
    step->forward(x, out);
    io.finish();
    times += io.times();
  }
  return times;
}

torch::Tensor normalize_rows(const data::UnitGaussianNormalizer& norm, const torch::Tensor& x,
                             int64_t r0, bool inverse) {
  if (!norm.fitted()) return x;
  auto mean = norm.mean(), sd = norm.std();
  if (norm.mode() == data::NormalizerMode::kPointwise) {
    mean = mean.narrow(2, r0, x.size(2));
    sd = sd.narrow(2, r0, x.size(2));
  }
  return inverse ? x * (sd + norm.eps()) + mean : (x - mean) / (sd + norm.eps());
}

// Estimated GPU bytes of a whole-grid forward without gradients for `b`
// samples: the weights, the input and output, and a few hidden-size tensors
// at once (the lifting's wider one, a block's input, its spectral and skip
// outputs, the channel MLP's).
int64_t whole_grid_bytes(FNO model, at::IntArrayRef x_shape, int64_t b, int64_t elem) {
  int64_t weights = 0;
  for (const auto& p : model->parameters()) weights += p.numel() * p.element_size();
  int64_t points = 1;
  for (size_t i = 2; i < x_shape.size(); ++i) points *= x_shape[i];
  const auto& o = model->options;
  const int64_t hidden = b * points * o.hidden_channels() * elem;
  const int64_t io = b * points * (o.in_channels() + o.out_channels()) * 4;
  return weights + 8 * hidden + 2 * io;
}

Plan choose_plan(FNO model, at::IntArrayRef x_shape, int64_t batch, const PredictOptions& o,
                 const torch::Device& device, int64_t elem) {
  Plan plan;
  std::vector<int64_t> one(x_shape.begin(), x_shape.end());
  one[0] = 1;
  auto tiles = [&](TiledPlan tp, int64_t micro) {
    TiledChoice c;
    c.plan = std::move(tp);
    c.micro_batches = micro;
    return c;
  };
  if (o.tile_rows > 0) {
    if (const auto why = tiled_unsupported(model); !why.empty()) {
      throw PredictUsageError("--tile-rows: this model cannot run in tiles: " + why);
    }
    TiledPlan tp;
    tp.tile_rows = o.tile_rows;
    tp.inputs.assign(static_cast<size_t>(model->options.n_layers()), TilePlace::kDevice);
    plan.micro = batch;
    plan.tiled = tiles(tp, 1);
    plan.text = "tiles of " + std::to_string(o.tile_rows) + " rows (forced), block inputs on the " +
                std::string(device.is_cuda() ? "GPU" : "CPU") + ", batches of " +
                std::to_string(batch);
    return plan;
  }
  if (o.gpu_memory_limit <= 0 || !device.is_cuda()) {
    plan.micro = batch;
    plan.text = "whole grid, batches of " + std::to_string(batch) +
                (o.gpu_memory_limit > 0 ? " (no GPU: --gpu-memory-limit does not apply)"
                                        : " (no memory limit)");
    return plan;
  }
  const int64_t budget = o.gpu_memory_limit;
  for (int64_t b = batch; b >= 1; b = b / 2) {
    const int64_t need = whole_grid_bytes(model, x_shape, b, elem);
    if (need <= budget) {
      plan.micro = b;
      plan.text = "whole grid, micro-batches of " + std::to_string(b) + " (estimated " +
                  offload::format_bytes(need) + " of " + offload::format_bytes(budget) + ")";
      return plan;
    }
  }
  // One sample is over the budget: tiles, from the training planner's
  // estimates (which count a backward as well, so they are on the safe side),
  // without pinned host stores (block inputs on the GPU or remade).
  if (const auto why = tiled_unsupported(model); !why.empty()) {
    throw std::runtime_error("--gpu-memory-limit " + offload::format_bytes(budget) +
                             ": one sample's whole-grid forward needs about " +
                             offload::format_bytes(whole_grid_bytes(model, x_shape, 1, elem)) +
                             ", and this model cannot run in tiles (" + why + ")");
  }
  TiledContext ctx;
  for (const auto& p : model->parameters()) ctx.base_bytes += p.numel() * p.element_size();
  for (const auto& c : tiled_candidates(model, one, budget, /*host_limit=*/1, ctx, 16)) {
    bool host = c.plan.gradient == TilePlace::kHost;
    for (const auto place : c.plan.inputs) host = host || place == TilePlace::kHost;
    if (host) continue;
    plan.micro = 1;
    plan.tiled = c;
    plan.text = "tiles, one sample at a time: " + c.to_string() + " (estimated " +
                offload::format_bytes(c.peak_bytes) + " of " + offload::format_bytes(budget) + ")";
    return plan;
  }
  const auto least = least_memory_tiled(model, one, ctx);
  throw std::runtime_error("--gpu-memory-limit " + offload::format_bytes(budget) +
                           " is under the floor: tiles of one sample need about " +
                           offload::format_bytes(least.peak_bytes) + " (estimated)");
}

}  // namespace fno::detail
