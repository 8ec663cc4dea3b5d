#include "predict_stream.h"

#include "stream_io.h"

#include <fno_engine/tiled_plan.h>
#include <fno_offload/planner.h>

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace fno::detail {

namespace {

int64_t weight_bytes(FNO model) {
  int64_t bytes = 0;
  for (const auto& p : model->parameters()) bytes += p.numel() * p.element_size();
  return bytes;
}

int64_t points(at::IntArrayRef shape) {
  int64_t n = 1;
  for (size_t i = 2; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Host bytes of the streaming itself for tiles of `rows`: the input tile (as
// read and as normalized), the output tile (its host copy, its float32 form),
// the reader's chunk cache, the writer's chunk cache (HDF5's default 1 MiB).
int64_t streaming_bytes(FNO model, at::IntArrayRef x_shape, int64_t rows, int64_t reader_cache) {
  const int64_t row_points = points(x_shape) / std::max<int64_t>(x_shape[2], 1);
  const int64_t tile_points = row_points * std::min(rows, x_shape[2]) * x_shape[0];
  const auto& o = model->options;
  return 2 * tile_points * o.in_channels() * 4 + 2 * tile_points * o.out_channels() * 4 +
         reader_cache + (int64_t{1} << 20);
}

// The device bytes of a tiled forward's tile of `rows`: a few tile-sized
// tensors of the hidden width at once (a block's input, its spectral output,
// the tail's intermediates, the lifting's and projection's wider layers), on
// the safe side.
constexpr int64_t kTileTensors = 12;

}  // namespace

StreamPlan choose_stream_plan(FNO model, const StreamRequest& r) {
  if (const auto why = tiled_unsupported(model); !why.empty()) {
    throw std::runtime_error("streamed prediction runs in tiles, and this model cannot: " + why);
  }
  StreamPlan s;
  const auto sizes = tiled_sizes(model, r.x_shape);
  const int64_t layers = model->options.n_layers();
  const int64_t s0 = r.x_shape[2];
  const int64_t input_bytes = points(r.x_shape) * r.x_shape[0] * r.x_shape[1] * 4;
  const int64_t host_limit = r.host_memory_limit;
  const bool cuda = r.device.is_cuda();
  const std::string limit_text =
      host_limit > 0 ? offload::format_bytes(host_limit) : std::string("no limit");
  const int64_t gpu_budget =
      !cuda ? 0 : (r.gpu_memory_limit > 0 ? r.gpu_memory_limit : offload::device_free_bytes());
  const int64_t base = cuda ? weight_bytes(model) + (int64_t{64} << 20) : 0;
  // On the CPU the tiles, the latest block input and the stream share the
  // host budget; on a GPU the device's.
  auto stream_host = [&](int64_t rows) {
    return streaming_bytes(model, r.x_shape, rows, r.reader_cache);
  };
  auto device_bytes = [&](int64_t rows, bool latest) {
    return base + (latest ? 2 * sizes.hidden : 0) + kTileTensors * sizes.tile_hidden(rows) +
           (cuda ? 0 : stream_host(rows));
  };
  const int64_t device_budget =
      cuda ? gpu_budget : (host_limit > 0 ? host_limit : std::numeric_limits<int64_t>::max());
  // The most rows (at most the grid's) whose tiles fit beside what is kept; 0: none.
  auto rows_within = [&](bool latest) -> int64_t {
    if (r.tile_rows > 0) {
      const int64_t rows = std::min(r.tile_rows, s0);
      return device_bytes(rows, latest) <= device_budget ? rows : 0;
    }
    if (!cuda && host_limit <= 0) return std::min<int64_t>(64, s0);
    int64_t lo = 0, hi = s0;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (device_bytes(mid, latest) <= device_budget) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    // A multiple of 8 rows past 16, so that the output's chunks (bands of a
    // power of two rows) are written whole.
    return lo >= 16 && lo < s0 ? lo / 8 * 8 : lo;
  };
  // Forward only: with the latest block input kept on the device, each sweep
  // reads the one before it from there, so nothing is stored anywhere; else
  // each sweep remakes its block input from the model input, tile by tile.
  // Block inputs are not pinned in host memory here: a prediction pins them
  // once, and pinning costs about 0.6 s/GiB (cudaHostAlloc), more than
  // remaking them (8192^2 under 12 GiB on an H100: 29.7 s with the four block
  // inputs pinned, 32 GB; results/h100-2026-11-27-s18/predict/).
  std::string places;
  int64_t rows = rows_within(true);
  if (rows > 0) {
    s.plan.keep_latest = true;
    s.plan.inputs.assign(static_cast<size_t>(layers), TilePlace::kRecompute);
    places = "the latest on the " + std::string(cuda ? "GPU" : "CPU");
  } else if ((rows = rows_within(false)) > 0) {
    s.plan.keep_latest = false;
    s.plan.inputs.assign(static_cast<size_t>(layers), TilePlace::kRecompute);
    places = "remade per tile from the model input";
  } else {
    const int64_t least_rows = r.tile_rows > 0 ? std::min(r.tile_rows, s0) : 1;
    throw std::runtime_error((cuda ? "--gpu-memory-limit " + offload::format_bytes(gpu_budget)
                                   : "--host-memory-limit " + limit_text) +
                             " is under the floor: streaming one sample in tiles of " +
                             std::to_string(least_rows) + " rows needs about " +
                             offload::format_bytes(device_bytes(least_rows, false)) +
                             (cuda ? " of GPU memory" : " of host memory") + " (estimated)");
  }
  s.plan.tile_rows = rows;
  s.plan.gradient = TilePlace::kDevice;  // (forward only)
  if (cuda) {
    s.gpu_bytes = device_bytes(rows, s.plan.keep_latest);
    s.host_bytes += stream_host(rows);
  } else {
    s.host_bytes = device_bytes(rows, s.plan.keep_latest);
  }
  // The input is read again by each sweep that remakes a block input from it:
  // kept in host memory after its first read where the budget allows.
  const bool from_input = !s.plan.keep_latest && layers > 0;
  s.keep_input = from_input && (host_limit <= 0 || s.host_bytes + input_bytes <= host_limit);
  if (s.keep_input) s.host_bytes += input_bytes;
  if (host_limit > 0 && s.host_bytes > host_limit) {
    throw std::runtime_error("--host-memory-limit " + limit_text +
                             " is under the floor: streaming one sample in tiles of " +
                             std::to_string(rows) + " rows needs about " +
                             offload::format_bytes(s.host_bytes) + " of host memory (estimated)");
  }
  s.text = "streamed in tiles of " + std::to_string(rows) +
           " rows, one sample at a time, block inputs " + places + ", input " +
           (s.keep_input ? "kept in host memory" : "read from the file per sweep") +
           " (estimated " + (cuda ? offload::format_bytes(s.gpu_bytes) + " GPU, " : std::string()) +
           offload::format_bytes(s.host_bytes) + " host of " + limit_text + ")";
  return s;
}

std::unique_ptr<TiledStep> plan_step(FNO model, const TiledPlan& plan,
                                     offload::Offloader* offloader) {
  TileStoreFactory host;
  if (offloader != nullptr && offloader->active()) {
    host = [offloader](const std::string& name) {
      return std::make_unique<PinnedTileStore>(*offloader, name);
    };
  }
  return std::make_unique<TiledStep>(std::move(model), plan, host);
}

StreamTimes predict_streamed(FNO model, const StreamPlan& plan, const data::Hdf5SlabReader& reader,
                             int64_t first, int64_t n, const torch::Device& device,
                             const data::UnitGaussianNormalizer& in_norm,
                             const data::UnitGaussianNormalizer& out_norm,
                             data::Hdf5SampleWriter& writer, offload::Offloader* offloader,
                             const std::function<void(int64_t sample)>& on_tile) {
  torch::NoGradGuard no_grad;
  const bool channels = model->options.out_channels() > 1;
  // One step for all samples: its host stores keep their pinned memory.
  const auto step = plan_step(model, plan.plan, offloader);
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
