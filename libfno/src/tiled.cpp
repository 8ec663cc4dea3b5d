#include <fno/tiled.h>

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>

#include "spectral.h"

namespace fno {

std::string to_string(TilePlace place) {
  switch (place) {
    case TilePlace::kDevice:
      return "device";
    case TilePlace::kHost:
      return "host";
    case TilePlace::kRecompute:
      return "recompute";
  }
  return "?";
}

TilePlace parse_tile_place(const std::string& text) {
  if (text == "device") return TilePlace::kDevice;
  if (text == "host") return TilePlace::kHost;
  if (text == "recompute") return TilePlace::kRecompute;
  throw std::invalid_argument("unknown tile place '" + text +
                              "' (expected device, host or recompute)");
}

std::string TiledPlan::to_string() const {
  std::ostringstream o;
  o << "tile_rows=" << tile_rows << ", inputs=";
  for (size_t i = 0; i < inputs.size(); ++i) o << (i ? "/" : "") << fno::to_string(inputs[i]);
  if (inputs.empty()) o << "default";
  o << ", gradient=" << fno::to_string(gradient) << ", keep_latest=" << (keep_latest ? 1 : 0);
  return o.str();
}

int64_t TiledSizes::tile_hidden(int64_t tile_rows) const {
  return rows > 0 ? hidden / rows * std::min(tile_rows, rows) : 0;
}

TiledSizes tiled_sizes(FNO model, at::IntArrayRef x_shape) {
  TiledSizes s;
  int64_t points = 1;
  for (size_t i = 2; i < x_shape.size(); ++i) points *= x_shape[i];
  const int64_t batch = x_shape.empty() ? 0 : x_shape[0];
  const auto elem = static_cast<int64_t>(c10::elementSize(model->options.compute_dtype()));
  s.hidden = batch * model->options.hidden_channels() * points * elem;
  s.output = batch * model->options.out_channels() * points * 4;
  s.rows = x_shape.size() > 2 ? x_shape[2] : 0;
  return s;
}

std::string tiled_unsupported(FNO model) {
  const auto& o = model->options;
  if (model->n_dim() < 2) return "tiled execution needs a 2D or 3D model (model.n_modes)";
  if (!o.domain_padding().empty()) {
    for (double p : o.domain_padding()) {
      if (p > 0) return "tiled execution does not support model.domain_padding";
    }
  }
  for (int64_t i = 0; i < o.n_layers(); ++i) {
    if (model->fno_blocks->channel_mlp[i]->as<ChannelMLP>()->fcs->size() != 2) {
      return "tiled execution needs two-layer channel MLPs in the blocks";
    }
  }
  return "";
}

namespace {

// Tiles on the compute device.
class DeviceTiles final : public TileStore {
 public:
  void put(int64_t t, const at::Tensor& tile) override {
    if (static_cast<int64_t>(tiles_.size()) <= t) tiles_.resize(static_cast<size_t>(t) + 1);
    tiles_[static_cast<size_t>(t)] = tile;
  }
  at::Tensor get(int64_t t) override {
    TORCH_CHECK(t >= 0 && t < static_cast<int64_t>(tiles_.size()) &&
                    tiles_[static_cast<size_t>(t)].defined(),
                "tiled step: tile ", t, " was never stored");
    return tiles_[static_cast<size_t>(t)];
  }
  void clear() override { tiles_.clear(); }

 private:
  std::vector<at::Tensor> tiles_;
};

std::vector<int64_t> all_tiles(int64_t count) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t) order[static_cast<size_t>(t)] = t;
  return order;
}

}  // namespace

struct TiledStep::Impl {
  FNO model{nullptr};
  TiledPlan plan;
  TileStoreFactory host;

  // ----- the current step ----------------------------------------------------
  int64_t layers = 0;
  std::vector<int64_t> spatial;                    // the grid [S0, ...]
  int64_t count = 0;                               // tiles
  c10::ScalarType dtype = c10::ScalarType::Float;  // activations
  std::vector<detail::SpectralModes> modes;        // per block
  std::vector<at::Tensor> X, Y;                    // per block: spectrum before / after mixing
  std::vector<TilePlace> places;                   // per block input
  std::vector<std::unique_ptr<TileStore>> stores;  // per block input (null: recompute)
  // The gradient between blocks: one store read and written in place on the
  // device; two alternating ones in host memory (a sweep reads one whole and
  // writes the other).
  std::unique_ptr<TileStore> gradients[2];
  std::vector<at::Tensor> latest;  // keep_latest: the input just made
  std::vector<at::Tensor> coords;  // grid coordinates per spatial dim (1-d)

  int64_t r0(int64_t t) const { return t * plan.tile_rows; }
  int64_t rows(int64_t t) const { return std::min(plan.tile_rows, spatial[0] - r0(t)); }
  at::Tensor rows_of(const at::Tensor& full, int64_t t) const {
    return full.narrow(2, r0(t), rows(t));
  }

  void setup(const at::Tensor& x);
  std::unique_ptr<TileStore> make_store(TilePlace place, const std::string& name) const;
  at::Tensor lift(const at::Tensor& x, int64_t t);
  at::Tensor block(int64_t j, const at::Tensor& a, const at::Tensor& y, int64_t t);
  at::Tensor project(const at::Tensor& z, int64_t t);
  at::Tensor next_input(const at::Tensor& z) const { return torch::gelu(z); }
  // The block input that block j's input is remade from: the nearest kept
  // one at or below j, or -1 (the lifting's output, from the model input).
  int64_t source(int64_t j) const;
  at::Tensor recompute(const at::Tensor& x, int64_t j, int64_t t);
  at::Tensor input(const at::Tensor& x, int64_t j, int64_t t);
  void expect_inputs(int64_t j);
  void keep(int64_t j, int64_t t, const at::Tensor& a, std::vector<at::Tensor>& next_latest);
  at::Tensor forward_sweeps(const at::Tensor& x, bool training);
  at::Tensor lifting_sweep(const at::Tensor& x, std::vector<at::Tensor>& next_latest);
  void backward_sweeps(const at::Tensor& x, const at::Tensor& d_out);
  at::Tensor mix_backward(int64_t j, const at::Tensor& dy);
  void finish_step();
};

void TiledStep::Impl::setup(const at::Tensor& x) {
  const auto why = tiled_unsupported(model);
  TORCH_CHECK(why.empty(), why);
  TORCH_CHECK(x.dim() == model->n_dim() + 2, "tiled step: expected a ", model->n_dim() + 2,
              "-d input [B, C, *S] for a ", model->n_dim(), "-d FNO, got shape ", x.sizes());
  TORCH_CHECK(x.size(1) == model->options.in_channels(), "tiled step: expected ",
              model->options.in_channels(), " input channels, got ", x.size(1));
  TORCH_CHECK(plan.tile_rows >= 1, "tiled step: tile_rows must be >= 1, got ", plan.tile_rows);
  layers = model->options.n_layers();
  TORCH_CHECK(plan.inputs.empty() || static_cast<int64_t>(plan.inputs.size()) == layers,
              "tiled step: the plan places ", plan.inputs.size(), " block inputs, the model has ",
              layers, " blocks");
  TORCH_CHECK(plan.gradient != TilePlace::kRecompute,
              "tiled step: the gradient between blocks cannot be recomputed (device or host)");
  spatial = x.sizes().slice(2).vec();
  count = (spatial[0] + plan.tile_rows - 1) / plan.tile_rows;
  const auto cd = model->options.compute_dtype();
  dtype = cd == torch::kFloat ? x.scalar_type() : cd;
  const auto options = x.options().dtype(dtype);
  modes.clear();
  for (int64_t j = 0; j < layers; ++j) {
    const auto& conv = *model->fno_blocks->convs[j]->as<SpectralConv>();
    modes.push_back(detail::spectral_modes(conv, spatial, options));
  }
  X.assign(static_cast<size_t>(layers), at::Tensor());
  Y.assign(static_cast<size_t>(layers), at::Tensor());
  places = plan.inputs;
  if (places.empty()) {
    places.assign(static_cast<size_t>(layers), TilePlace::kDevice);
    places[0] = TilePlace::kRecompute;
  }
  // The stores live across steps (a host store keeps its pinned memory).
  if (static_cast<int64_t>(stores.size()) != layers) {
    stores.clear();
    for (int64_t j = 0; j < layers; ++j) {
      stores.push_back(
          make_store(places[static_cast<size_t>(j)], "block." + std::to_string(j) + " input"));
    }
    gradients[0] = make_store(plan.gradient, "gradient");
    if (plan.gradient == TilePlace::kHost) gradients[1] = make_store(plan.gradient, "gradient'");
  }
  latest.clear();
  coords.clear();
  if (model->positional_embedding) {
    // linspace(0, 1, res + 1)[:-1] in float32 on the CPU, as GridEmbedding makes them.
    for (const auto s : spatial) {
      coords.push_back(
          torch::linspace(0.0, 1.0, s + 1).narrow(0, 0, s).to(x.device(), dtype).contiguous());
    }
  }
}

std::unique_ptr<TileStore> TiledStep::Impl::make_store(TilePlace place,
                                                       const std::string& name) const {
  switch (place) {
    case TilePlace::kDevice:
      return std::make_unique<DeviceTiles>();
    case TilePlace::kHost:
      TORCH_CHECK(host != nullptr, "tiled step: the plan keeps the ", name,
                  " in host memory, but no host store was given");
      return host(name);
    case TilePlace::kRecompute:
      return nullptr;
  }
  return nullptr;
}

// The lifting of tile t: its grid coordinates appended, then the lifting MLP.
// x: [B, Cin, *S] -> [B, hidden, rows, *S']
at::Tensor TiledStep::Impl::lift(const at::Tensor& x, int64_t t) {
  auto xt = rows_of(x, t);
  if (xt.scalar_type() != dtype) xt = xt.to(dtype);
  if (!coords.empty()) {
    const int64_t d = static_cast<int64_t>(spatial.size());
    std::vector<int64_t> shape{xt.size(0), 1, rows(t)};
    shape.insert(shape.end(), spatial.begin() + 1, spatial.end());
    std::vector<at::Tensor> parts{xt};
    for (int64_t i = 0; i < d; ++i) {
      const auto c = i == 0 ? coords[0].narrow(0, r0(t), rows(t)) : coords[static_cast<size_t>(i)];
      std::vector<int64_t> view(static_cast<size_t>(d + 2), 1);
      view[static_cast<size_t>(i + 2)] = c.size(0);
      parts.push_back(c.view(view).expand(shape));
    }
    xt = torch::cat(parts, 1);
  }
  return model->lifting->forward(xt);
}

// Block j on tile t: the pointwise tail on the block's input tile and the
// rows of its spectral output (the inverse transform of the mixed spectrum y).
// a: [B, C, rows, *S'] (post-activation) -> z: [B, C, rows, *S'] (pre-activation)
at::Tensor TiledStep::Impl::block(int64_t j, const at::Tensor& a, const at::Tensor& y, int64_t t) {
  auto& blocks = *model->fno_blocks;
  const auto s =
      detail::synthesis_tile(modes[static_cast<size_t>(j)], y, r0(t), rows(t), a.scalar_type());
  const auto& skip_w = blocks.fno_skips[j]->as<LinearSkip>()->conv->weight;
  const auto& gate = blocks.channel_mlp_skips[j]->as<SoftGating>()->weight;
  auto& mlp = *blocks.channel_mlp[j]->as<ChannelMLP>();
  const auto& fc0 = *mlp.fcs[0]->as<PointwiseLinear>();
  const auto& fc1 = *mlp.fcs[1]->as<PointwiseLinear>();
  return block_tail(a, a, s, skip_w, fc0.weight, fc0.bias, fc1.weight, fc1.bias, gate,
                    /*gelu_input=*/false, /*gelu_mid=*/j != layers - 1);
}

// z: [B, C, rows, *S'] -> [B, Cout, rows, *S'] in the parameters' type
at::Tensor TiledStep::Impl::project(const at::Tensor& z, int64_t t) {
  auto tile = spatial;
  tile[0] = rows(t);
  return model->forward_project(z, tile);
}

// Block j's input on tile t, remade from the nearest kept input below it (or
// the lifting) with the spectra known so far.
int64_t TiledStep::Impl::source(int64_t j) const {
  for (int64_t k = j; k >= 0; --k) {
    if (stores[static_cast<size_t>(k)]) return k;
  }
  return -1;
}

at::Tensor TiledStep::Impl::recompute(const at::Tensor& x, int64_t j, int64_t t) {
  const int64_t from = source(j);
  const int64_t k = std::max<int64_t>(from, 0);
  auto a = from >= 0 ? stores[static_cast<size_t>(from)]->get(t) : lift(x, t);
  for (int64_t m = k; m < j; ++m) a = next_input(block(m, a, Y[static_cast<size_t>(m)], t));
  return a;
}

at::Tensor TiledStep::Impl::input(const at::Tensor& x, int64_t j, int64_t t) {
  if (static_cast<int64_t>(latest.size()) > t && latest[static_cast<size_t>(t)].defined()) {
    auto a = std::move(latest[static_cast<size_t>(t)]);
    latest[static_cast<size_t>(t)] = at::Tensor();
    return a;
  }
  if (stores[static_cast<size_t>(j)]) return stores[static_cast<size_t>(j)]->get(t);
  return recompute(x, j, t);
}

// Announces the reads of block j's input (or of the store it is remade from).
void TiledStep::Impl::expect_inputs(int64_t j) {
  if (static_cast<int64_t>(latest.size()) == count) return;  // all in `latest`
  const int64_t from = source(j);
  if (from >= 0) stores[static_cast<size_t>(from)]->expect(all_tiles(count));
}

void TiledStep::Impl::keep(int64_t j, int64_t t, const at::Tensor& a,
                           std::vector<at::Tensor>& next_latest) {
  if (stores[static_cast<size_t>(j)]) stores[static_cast<size_t>(j)]->put(t, a);
  if (plan.keep_latest) next_latest[static_cast<size_t>(t)] = a;
}

// The lifting's sweep: a_0 per tile, and its share of block 0's spectrum.
at::Tensor TiledStep::Impl::lifting_sweep(const at::Tensor& x, std::vector<at::Tensor>& next) {
  at::Tensor sum;
  for (int64_t t = 0; t < count; ++t) {
    const auto a = lift(x, t);
    const auto part = detail::analysis_tile(modes[0], a, r0(t));
    sum = sum.defined() ? sum.add_(part) : part;
    keep(0, t, a, next);
  }
  return sum;
}

// Forward: the lifting's sweep, then one sweep per block. Returns the output
// [B, Cout, *S]. Without `training`, block inputs are dropped once read.
at::Tensor TiledStep::Impl::forward_sweeps(const at::Tensor& x, bool training) {
  torch::NoGradGuard no_grad;
  const auto& conv0 = *model->fno_blocks->convs[0]->as<SpectralConv>();
  std::vector<at::Tensor> next(static_cast<size_t>(count));
  X[0] = lifting_sweep(x, next);
  Y[0] = detail::mix_modes(conv0, modes[0], X[0], true);
  latest = std::move(next);
  auto out_shape = x.sizes().vec();
  out_shape[1] = model->options.out_channels();
  const auto param_type = model->projection->fcs[0]->as<PointwiseLinear>()->weight.scalar_type();
  auto out = torch::empty(out_shape, x.options().dtype(param_type));
  for (int64_t j = 0; j < layers; ++j) {
    const bool last = j == layers - 1;
    if (!plan.keep_latest) latest.clear();
    expect_inputs(j);
    next.assign(static_cast<size_t>(count), at::Tensor());
    at::Tensor sum;
    for (int64_t t = 0; t < count; ++t) {
      const auto z = block(j, input(x, j, t), Y[static_cast<size_t>(j)], t);
      if (last) {
        rows_of(out, t).copy_(project(z, t));
        continue;
      }
      const auto a = next_input(z);
      const auto part = detail::analysis_tile(modes[static_cast<size_t>(j + 1)], a, r0(t));
      sum = sum.defined() ? sum.add_(part) : part;
      keep(j + 1, t, a, next);
    }
    if (!training) {
      // Evaluation keeps only the store the next block's input comes from.
      const int64_t keep_from = last ? -1 : source(j + 1);
      for (int64_t k = 0; k <= j; ++k) {
        if (k != keep_from && stores[static_cast<size_t>(k)])
          stores[static_cast<size_t>(k)]->clear();
      }
    }
    latest = std::move(next);
    if (!last) {
      const auto& conv = *model->fno_blocks->convs[j + 1]->as<SpectralConv>();
      X[static_cast<size_t>(j + 1)] = sum;
      Y[static_cast<size_t>(j + 1)] =
          detail::mix_modes(conv, modes[static_cast<size_t>(j + 1)], sum, true);
    }
  }
  latest.clear();
  return out;
}

// The mixing of block j again, with gradients: dy (the gradient of its mixed
// spectrum) -> the gradient of its spectrum before mixing; the weight's and
// bias' gradients accumulate.
at::Tensor TiledStep::Impl::mix_backward(int64_t j, const at::Tensor& dy) {
  const auto& conv = *model->fno_blocks->convs[j]->as<SpectralConv>();
  // The weight slice again, now with the parameter's history.
  auto m = modes[static_cast<size_t>(j)];
  m.weight = detail::spectral_modes(conv, spatial, dy.options().dtype(dtype)).weight;
  const auto xl = X[static_cast<size_t>(j)].detach().requires_grad_(true);
  const auto yl = detail::mix_modes(conv, m, xl, true);
  torch::autograd::backward({yl}, {dy});
  return xl.grad();
}

// Backward: one sweep per block, last first, then the lifting's. Block j's
// sweep remakes each tile of the block (input, spectral output, tail) with
// gradients and backpropagates into it, from the output's gradient (the last
// block) or from the gradient at the next block's input: the next block's
// tail part (the gradient store) plus its spectral part (the adjoint of that
// block's analysis applied to its spectrum's gradient). It stores the
// gradient at its own input's tail part, and sums its mixed spectrum's.
void TiledStep::Impl::backward_sweeps(const at::Tensor& x, const at::Tensor& d_out) {
  TileStore* g_read = gradients[0].get();
  TileStore* g_write = gradients[1].get();  // null on the device: in place
  at::Tensor d_next;  // the gradient of the next block's spectrum (before mixing)
  for (int64_t j = layers - 1; j >= 0; --j) {
    const bool last = j == layers - 1;
    expect_inputs(j);
    if (!last) g_read->expect(all_tiles(count));
    auto& g_out = g_write != nullptr ? *g_write : *g_read;
    const auto yl = Y[static_cast<size_t>(j)].detach().requires_grad_(true);
    for (int64_t t = 0; t < count; ++t) {
      at::Tensor a_in;
      {
        torch::NoGradGuard no_grad;
        a_in = input(x, j, t);
      }
      const auto a = a_in.detach().requires_grad_(true);
      const auto z = block(j, a, yl, t);
      if (last) {
        torch::autograd::backward({project(z, t)}, {rows_of(d_out, t)});
      } else {
        const auto an = next_input(z);
        const auto part = detail::analysis_tile(modes[static_cast<size_t>(j + 1)], an, r0(t));
        torch::autograd::backward({an, part}, {g_read->get(t), d_next});
      }
      g_out.put(t, a.grad());
    }
    if (stores[static_cast<size_t>(j)]) stores[static_cast<size_t>(j)]->clear();
    d_next = mix_backward(j, yl.grad());
    if (g_write != nullptr) std::swap(g_read, g_write);
  }
  // The lifting: its output's gradient is block 0's input's.
  g_read->expect(all_tiles(count));
  for (int64_t t = 0; t < count; ++t) {
    const auto a = lift(x, t);
    const auto part = detail::analysis_tile(modes[0], a, r0(t));
    torch::autograd::backward({a, part}, {g_read->get(t), d_next});
  }
}

void TiledStep::Impl::finish_step() {
  for (auto& s : stores) {
    if (s) s->clear();
  }
  for (auto& g : gradients) {
    if (g) g->clear();
  }
  latest.clear();
  X.assign(X.size(), at::Tensor());
  Y.assign(Y.size(), at::Tensor());
}

TiledStep::TiledStep(FNO model, TiledPlan plan, TileStoreFactory host)
    : p_(std::make_unique<Impl>()) {
  p_->model = std::move(model);
  p_->plan = std::move(plan);
  p_->host = std::move(host);
  const auto why = tiled_unsupported(p_->model);
  TORCH_CHECK(why.empty(), why);
  TORCH_CHECK(p_->plan.tile_rows >= 1, "tiled step: tile_rows must be >= 1, got ",
              p_->plan.tile_rows);
}

TiledStep::~TiledStep() = default;

const TiledPlan& TiledStep::plan() const { return p_->plan; }

at::Tensor TiledStep::forward_backward(
    const at::Tensor& x, const at::Tensor& y,
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss) {
  auto& p = *p_;
  p.setup(x);
  try {
    const auto out = p.forward_sweeps(x, /*training=*/true).requires_grad_(true);
    const auto l = loss(out, y);
    l.backward();
    p.backward_sweeps(x, out.grad());
    p.finish_step();
    return l.detach();
  } catch (...) {
    p.finish_step();
    throw;
  }
}

at::Tensor TiledStep::forward(const at::Tensor& x) {
  auto& p = *p_;
  p.setup(x);
  try {
    auto out = p.forward_sweeps(x, /*training=*/false);
    p.finish_step();
    return out;
  } catch (...) {
    p.finish_step();
    throw;
  }
}

}  // namespace fno
