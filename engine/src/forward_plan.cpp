#include <fno_engine/forward_plan.h>

#include <fno_engine/forward_graphs.h>
#include <fno_engine/tiled_runner.h>
#include <fno_offload/planner.h>

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace fno {

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

std::string where(const torch::Device& device) { return device.is_cuda() ? "GPU" : "CPU"; }

// Host bytes of the streaming itself for tiles of `rows`: the input tile (as
// read and as normalized), the output tile (its host copy, its float32 form),
// and what the source and sink hold beside them (`io_bytes`).
int64_t streaming_bytes(FNO model, at::IntArrayRef x_shape, int64_t rows, int64_t io_bytes) {
  const int64_t row_points = points(x_shape) / std::max<int64_t>(x_shape[2], 1);
  const int64_t tile_points = row_points * std::min(rows, x_shape[2]) * x_shape[0];
  const auto& o = model->options;
  return 2 * tile_points * o.in_channels() * 4 + 2 * tile_points * o.out_channels() * 4 + io_bytes;
}

// The device bytes of a tiled forward's tile of `rows`: a few tile-sized
// tensors of the hidden width at once (a block's input, its spectral output,
// the tail's intermediates, the lifting's and projection's wider layers), on
// the safe side.
constexpr int64_t kTileTensors = 12;

// A streamed forward's estimates for one sample of `shape`: on the CPU the
// tiles, the latest block input and the stream share the host budget; on a
// GPU the device's.
struct StreamEstimate {
  FNO model;
  std::vector<int64_t> shape;
  TiledSizes sizes;
  int64_t s0, tile_rows, io_bytes, base, device_budget;
  bool cuda, unlimited;

  StreamEstimate(FNO m, at::IntArrayRef one_shape, const ForwardBudget& budget,
                 const torch::Device& device, int64_t io)
      : model(std::move(m)),
        shape(one_shape.vec()),
        sizes(tiled_sizes(model, one_shape)),
        s0(one_shape[2]),
        tile_rows(budget.tile_rows()),
        io_bytes(io),
        base(device.is_cuda() ? weight_bytes(model) + (int64_t{64} << 20) : 0),
        cuda(device.is_cuda()),
        unlimited(!device.is_cuda() && budget.host_memory_limit() <= 0) {
    const int64_t host = budget.host_memory_limit();
    device_budget = cuda ? (budget.gpu_memory_limit() > 0 ? budget.gpu_memory_limit()
                                                          : offload::device_free_bytes())
                         : (host > 0 ? host : std::numeric_limits<int64_t>::max());
  }
  int64_t stream_host(int64_t rows) const { return streaming_bytes(model, shape, rows, io_bytes); }
  int64_t device_bytes(int64_t rows, bool latest) const {
    return base + (latest ? 2 * sizes.hidden : 0) + kTileTensors * sizes.tile_hidden(rows) +
           (cuda ? 0 : stream_host(rows));
  }
  // The most rows (at most the grid's) whose tiles fit beside what is kept; 0: none.
  int64_t rows_within(bool latest) const {
    if (tile_rows > 0) {
      const int64_t rows = std::min(tile_rows, s0);
      return device_bytes(rows, latest) <= device_budget ? rows : 0;
    }
    if (unlimited) return std::min<int64_t>(64, s0);
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
  }
};

// Tiles of one sample for a GPU budget, from a forward's own needs (as a
// streamed forward's, StreamEstimate, with the sample's output held whole): a forward keeps no
// block input but the latest, and makes no gradient, so the training planner's estimates (a
// backward's full-size gradient among them) do not apply. The largest tiles first, with the latest
// block input kept on the device, else each remade per tile from the input.
ForwardPlan tiles_within(FNO model, at::IntArrayRef x_shape, int64_t budget, int64_t elem) {
  if (const auto why = tiled_unsupported(model); !why.empty()) {
    throw ForwardBudgetError(
        ForwardBudgetError::Limit::kGpuMemory,
        offload::format_bytes(budget) + ": one sample's whole-grid forward needs about " +
            offload::format_bytes(whole_grid_forward_bytes(model, x_shape, 1, elem)) +
            ", and this model cannot run in tiles (" + why + ")");
  }
  std::vector<int64_t> one(x_shape.begin(), x_shape.end());
  one[0] = 1;
  StreamEstimate e(model, one, ForwardBudget().gpu_memory_limit(budget),
                   torch::Device(torch::kCUDA), 0);
  // What the forward holds beside its tiles: the weights and the sample's
  // output, made whole (no margin, as whole_grid_forward_bytes).
  e.base = weight_bytes(model) + e.sizes.output;
  for (const bool latest : {true, false}) {
    const int64_t rows = e.rows_within(latest);
    if (rows <= 0) continue;
    ForwardPlan plan;
    plan.micro = 1;
    TiledChoice c;
    c.plan.tile_rows = rows;
    c.plan.inputs.assign(static_cast<size_t>(model->options.n_layers()), TilePlace::kRecompute);
    c.plan.gradient = TilePlace::kDevice;  // (forward only)
    c.plan.keep_latest = latest;
    c.peak_bytes = e.device_bytes(rows, latest);
    plan.tiled = c;
    plan.text = "tiles of " + std::to_string(rows) + " rows, one sample at a time, block inputs " +
                (latest ? "the latest on the GPU" : "remade per tile from the input") +
                " (estimated " + offload::format_bytes(c.peak_bytes) + " of " +
                offload::format_bytes(budget) + ")";
    return plan;
  }
  throw ForwardBudgetError(ForwardBudgetError::Limit::kGpuMemory,
                           offload::format_bytes(budget) +
                               " is under the floor: tiles of one sample need about " +
                               offload::format_bytes(e.device_bytes(1, false)) + " (estimated)");
}

}  // namespace

ForwardBudgetError::ForwardBudgetError(Limit limit, const std::string& detail)
    : std::runtime_error(std::string(name(limit)) + (limit == Limit::kTileRows ? ": " : " ") +
                         detail),
      limit_(limit),
      detail_(detail) {}

const char* ForwardBudgetError::name(Limit limit) {
  switch (limit) {
    case Limit::kGpuMemory:
      return "GPU memory limit";
    case Limit::kHostMemory:
      return "host memory limit";
    case Limit::kTileRows:
      return "forced tile rows";
  }
  return "limit";
}

int64_t whole_grid_forward_bytes(FNO model, at::IntArrayRef x_shape, int64_t b, int64_t elem) {
  const auto& o = model->options;
  const int64_t n = points(x_shape);
  // The lifting's wider one, a block's input, its spectral and skip outputs,
  // the channel MLP's: eight hidden-size tensors on the safe side.
  const int64_t hidden = b * n * o.hidden_channels() * elem;
  const int64_t io = b * n * (o.in_channels() + o.out_channels()) * 4;
  return weight_bytes(model) + 8 * hidden + 2 * io;
}

ForwardPlan choose_forward_plan(FNO model, at::IntArrayRef x_shape, const ForwardBudget& budget,
                                const torch::Device& device, int64_t elem) {
  TORCH_CHECK(x_shape.size() >= 3, "choose_forward_plan: expected [B, Cin, *S], got ", x_shape);
  const int64_t batch = x_shape[0];
  ForwardPlan plan;
  if (budget.tile_rows() > 0) {
    if (const auto why = tiled_unsupported(model); !why.empty()) {
      throw ForwardBudgetError(ForwardBudgetError::Limit::kTileRows,
                               "this model cannot run in tiles: " + why);
    }
    TiledChoice c;
    c.plan.tile_rows = budget.tile_rows();
    c.plan.inputs.assign(static_cast<size_t>(model->options.n_layers()), TilePlace::kDevice);
    plan.micro = batch;
    plan.tiled = c;
    plan.text = "tiles of " + std::to_string(budget.tile_rows()) +
                " rows (forced), block inputs on the " + where(device) + ", batches of " +
                std::to_string(batch);
    return plan;
  }
  const int64_t limit = budget.gpu_memory_limit();
  if (limit <= 0 || !device.is_cuda()) {
    plan.micro = batch;
    plan.text =
        "whole grid, batches of " + std::to_string(batch) +
        (limit > 0 ? " (no GPU: the GPU memory limit does not apply)" : " (no memory limit)");
    return plan;
  }
  for (int64_t b = batch; b >= 1; b = b / 2) {
    const int64_t need = whole_grid_forward_bytes(model, x_shape, b, elem);
    if (need <= limit) {
      plan.micro = b;
      plan.text = "whole grid, micro-batches of " + std::to_string(b) + " (estimated " +
                  offload::format_bytes(need) + " of " + offload::format_bytes(limit) + ")";
      return plan;
    }
  }
  return tiles_within(model, x_shape, limit, elem);
}

at::Tensor forward_under_plan(FNO model, const ForwardPlan& plan, const at::Tensor& x,
                              TiledRunner* tiles, ForwardGraphs* graphs) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(!plan.tiled || tiles != nullptr,
              "forward_under_plan: a tiled plan needs a TiledRunner (", plan.text, ")");
  TORCH_CHECK(!plan.graphed || plan.tiled || graphs != nullptr,
              "forward_under_plan: a graphed plan needs its ForwardGraphs (", plan.text, ")");
  const int64_t batch = x.size(0);
  const int64_t per = std::max<int64_t>(1, plan.micro);
  auto one = [&](const at::Tensor& xb) {
    // xb: [b, Cin, *S] -> [b, Cout, *S]
    if (plan.tiled) return tiles->forward(plan.tiled->plan, xb);
    return plan.graphed ? graphs->forward(xb) : model->forward(xb);
  };
  if (per >= batch) return one(x);
  std::vector<at::Tensor> outs;
  for (int64_t first = 0; first < batch; first += per) {
    outs.push_back(one(x.narrow(0, first, std::min(per, batch - first))));
  }
  return torch::cat(outs, 0);
}

StreamedPlan choose_streamed_plan(FNO model, at::IntArrayRef one_shape, const ForwardBudget& budget,
                                  const torch::Device& device, int64_t io_bytes) {
  if (const auto why = tiled_unsupported(model); !why.empty()) {
    throw std::runtime_error("a streamed forward runs in tiles, and this model cannot: " + why);
  }
  StreamedPlan s;
  const StreamEstimate e(model, one_shape, budget, device, io_bytes);
  const int64_t layers = model->options.n_layers();
  const int64_t input_bytes = points(one_shape) * one_shape[0] * one_shape[1] * 4;
  const int64_t host_limit = budget.host_memory_limit();
  const bool cuda = device.is_cuda();
  const std::string limit_text =
      host_limit > 0 ? offload::format_bytes(host_limit) : std::string("no limit");
  // Forward only: with the latest block input kept on the device, each sweep
  // reads the one before it from there, so nothing is stored anywhere; else
  // each sweep remakes its block input from the model input, tile by tile.
  // Block inputs are not pinned in host memory here: a prediction pins them
  // once, and pinning costs about 0.6 s/GiB (cudaHostAlloc), more than
  // remaking them (8192^2 under 12 GiB on an H100: 29.7 s with the four block
  // inputs pinned, 32 GB; results/h100-2026-11-27-s18/predict/).
  std::string places;
  int64_t rows = e.rows_within(true);
  if (rows > 0) {
    s.plan.keep_latest = true;
    places = "the latest on the " + where(device);
  } else if ((rows = e.rows_within(false)) > 0) {
    s.plan.keep_latest = false;
    places = "remade per tile from the model input";
  } else {
    const int64_t least_rows = budget.tile_rows() > 0 ? std::min(budget.tile_rows(), e.s0) : 1;
    throw ForwardBudgetError(
        cuda ? ForwardBudgetError::Limit::kGpuMemory : ForwardBudgetError::Limit::kHostMemory,
        (cuda ? offload::format_bytes(e.device_budget) : limit_text) +
            " is under the floor: streaming one sample in tiles of " + std::to_string(least_rows) +
            " rows needs about " + offload::format_bytes(e.device_bytes(least_rows, false)) +
            (cuda ? " of GPU memory" : " of host memory") + " (estimated)");
  }
  s.plan.inputs.assign(static_cast<size_t>(layers), TilePlace::kRecompute);
  s.plan.tile_rows = rows;
  s.plan.gradient = TilePlace::kDevice;  // (forward only)
  if (cuda) {
    s.gpu_bytes = e.device_bytes(rows, s.plan.keep_latest);
    s.host_bytes += e.stream_host(rows);
  } else {
    s.host_bytes = e.device_bytes(rows, s.plan.keep_latest);
  }
  // The input is read again by each sweep that remakes a block input from it:
  // kept in host memory after its first read where the budget allows.
  const bool from_input = !s.plan.keep_latest && layers > 0;
  s.keep_input = from_input && (host_limit <= 0 || s.host_bytes + input_bytes <= host_limit);
  if (s.keep_input) s.host_bytes += input_bytes;
  if (host_limit > 0 && s.host_bytes > host_limit) {
    throw ForwardBudgetError(ForwardBudgetError::Limit::kHostMemory,
                             limit_text + " is under the floor: streaming one sample in tiles of " +
                                 std::to_string(rows) + " rows needs about " +
                                 offload::format_bytes(s.host_bytes) +
                                 " of host memory (estimated)");
  }
  s.text = "streamed in tiles of " + std::to_string(rows) +
           " rows, one sample at a time, block inputs " + places + ", input " +
           (s.keep_input ? "kept in host memory" : "read from the file per sweep") +
           " (estimated " + (cuda ? offload::format_bytes(s.gpu_bytes) + " GPU, " : std::string()) +
           offload::format_bytes(s.host_bytes) + " host of " + limit_text + ")";
  return s;
}

std::unique_ptr<TiledStep> streamed_step(FNO model, const TiledPlan& plan,
                                         offload::Offloader* offloader) {
  TileStoreFactory host;
  if (offloader != nullptr && offloader->active()) {
    host = [offloader](const std::string& name) {
      return std::make_unique<PinnedTileStore>(*offloader, name);
    };
  }
  return std::make_unique<TiledStep>(std::move(model), plan, host);
}

}  // namespace fno
