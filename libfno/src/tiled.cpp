#include <fno/tiled.h>

#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "block_tail_fused.h"
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

TiledPlan parse_tiled_plan(const std::string& text) {
  TiledPlan plan;
  bool rows = false, inputs = false, gradient = false, latest = false;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const auto b = item.find_first_not_of(' ');
    item = b == std::string::npos ? std::string() : item.substr(b);
    const auto eq = item.find('=');
    const auto key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    try {
      if (key == "tile_rows") {
        size_t used = 0;
        plan.tile_rows = std::stoll(value, &used);
        rows = used == value.size() && plan.tile_rows >= 1;
      } else if (key == "inputs") {
        plan.inputs.clear();
        std::stringstream places(value);
        for (std::string p; std::getline(places, p, '/');) {
          if (p != "default") plan.inputs.push_back(parse_tile_place(p));
        }
        inputs = true;
      } else if (key == "gradient") {
        plan.gradient = parse_tile_place(value);
        gradient = plan.gradient != TilePlace::kRecompute;
      } else if (key == "keep_latest") {
        plan.keep_latest = value == "1";
        latest = value == "1" || value == "0";
      }
    } catch (const std::exception&) {
      throw std::invalid_argument("tiled plan '" + text + "': bad " + key + " '" + value + "'");
    }
  }
  if (!(rows && inputs && gradient && latest)) {
    throw std::invalid_argument("tiled plan '" + text +
                                "': expected tile_rows=R, inputs=P/P/..., gradient=device|host, "
                                "keep_latest=0|1");
  }
  return plan;
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
  if (!o.use_channel_mlp())
    return "tiled execution needs the blocks' channel MLPs (model.use_channel_mlp)";
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

// A two-layer channel MLP's {w1, b1, w2, b2} (a bias may be undefined), or
// nothing for another depth.
std::vector<at::Tensor> mlp2_params(ChannelMLP mlp) {
  if (mlp->fcs->size() != 2) return {};
  const auto& l0 = *mlp->fcs[0]->as<PointwiseLinear>();
  const auto& l1 = *mlp->fcs[1]->as<PointwiseLinear>();
  return {l0.weight, l0.bias, l1.weight, l1.bias};
}

// Adds a channel MLP's weight gradients into `sums` (mlp2_params' order).
void add_mlp2_grads(std::vector<at::Tensor>& sums, const ChannelMLP2Grads& g) {
  sums.resize(4);
  const at::Tensor* grads[4] = {&g.w1, &g.b1, &g.w2, &g.b2};
  for (size_t i = 0; i < 4; ++i) {
    if (!grads[i]->defined()) continue;
    sums[i] = sums[i].defined() ? sums[i].add_(*grads[i]) : *grads[i];
  }
}

// The parameters' gradients, summed over a sweep's tiles, through autograd
// once (their accumulation and gradient hooks, as a whole-grid backward's).
void backward_params(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& sums) {
  std::vector<at::Tensor> ps, gs;
  for (size_t i = 0; i < params.size() && i < sums.size(); ++i) {
    if (params[i].defined() && sums[i].defined()) {
      ps.push_back(params[i]);
      gs.push_back(sums[i]);
    }
  }
  torch::AutoGradMode grad_mode(true);
  if (!ps.empty()) torch::autograd::backward(ps, gs);
}

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
  // Grid coordinates per spatial dim (1-d), kept across steps of one grid,
  // device and type: making them copies from the host, which waits for the GPU.
  std::vector<at::Tensor> coords;
  std::vector<int64_t> coords_grid;
  // A streamed forward (forward(TileSource, TileSink)): the model input's rows
  // come from x_rows instead of x, and the output's go to sink.
  std::function<at::Tensor(int64_t, int64_t)> x_rows;
  TileSink sink;

  Band band;       // this rank's rows of the grid (set_band)
  int64_t n0 = 0;  // rows of the input: the band's, or the grid's
  // Tile t's first row in the input, and in the whole grid (DFT phases, coordinates).
  int64_t r0(int64_t t) const { return t * plan.tile_rows; }
  int64_t g0(int64_t t) const { return band.row0 + r0(t); }
  int64_t rows(int64_t t) const { return std::min(plan.tile_rows, n0 - r0(t)); }
  // The sum over the band's ranks of a spectrum (or its gradient), in place.
  void reduce(at::Tensor& spectrum) const {
    if (!band.split()) return;
    if (!spectrum.is_contiguous()) spectrum = spectrum.contiguous();
    band.sum(spectrum);
  }
  at::Tensor rows_of(const at::Tensor& full, int64_t t) const {
    return full.narrow(2, r0(t), rows(t));
  }

  void setup(const at::Tensor& x) { setup(x.sizes(), x.options()); }
  void setup(at::IntArrayRef x_shape, const at::TensorOptions& x_options);
  std::unique_ptr<TileStore> make_store(TilePlace place, const std::string& name) const;
  at::Tensor lift_input(const at::Tensor& x, int64_t t);
  at::Tensor lift(const at::Tensor& x, int64_t t) {
    return model->lifting->forward(lift_input(x, t));
  }
  void lifting_backward(const at::Tensor& x, TileStore& g_read, const at::Tensor& d_next);
  // Block j on a tile, given its input a and its spectral output s.
  struct TailWeights;
  TailWeights weights(int64_t j);
  at::Tensor spectral(int64_t j, const at::Tensor& y, int64_t t) const;
  at::Tensor tail_next(int64_t j, const at::Tensor& a, const at::Tensor& s);
  std::pair<at::Tensor, at::Tensor> tail_backward(int64_t j, const at::Tensor& g,
                                                  const at::Tensor& a, const at::Tensor& s,
                                                  std::vector<at::Tensor>& sums);
  at::Tensor block(int64_t j, const at::Tensor& a, int64_t t) {
    return tail_next(j, a, spectral(j, Y[static_cast<size_t>(j)], t));
  }
  at::Tensor project(const at::Tensor& z, int64_t t);
  // The block input that block j's input is remade from: the nearest kept
  // one at or below j, or -1 (the lifting's output, from the model input).
  int64_t source(int64_t j) const;
  at::Tensor recompute(const at::Tensor& x, int64_t j, int64_t t);
  at::Tensor input(const at::Tensor& x, int64_t j, int64_t t);
  void expect_inputs(int64_t j);
  bool expect_next_inputs_early(int64_t j);
  void keep(int64_t j, int64_t t, const at::Tensor& a, std::vector<at::Tensor>& next_latest);
  at::Tensor forward_sweeps(const at::Tensor& x, bool training);
  at::Tensor lifting_sweep(const at::Tensor& x, std::vector<at::Tensor>& next_latest);
  void backward_sweeps(const at::Tensor& x, const at::Tensor& d_out);
  at::Tensor mix_backward(int64_t j, const at::Tensor& dy);
  void finish_step();
};

void TiledStep::Impl::setup(at::IntArrayRef x_shape, const at::TensorOptions& x_options) {
  const auto why = tiled_unsupported(model);
  TORCH_CHECK(why.empty(), why);
  const int64_t x_dim = static_cast<int64_t>(x_shape.size());
  TORCH_CHECK(x_dim == model->n_dim() + 2, "tiled step: expected a ", model->n_dim() + 2,
              "-d input [B, C, *S] for a ", model->n_dim(), "-d FNO, got shape ", x_shape);
  TORCH_CHECK(x_shape[1] == model->options.in_channels(), "tiled step: expected ",
              model->options.in_channels(), " input channels, got ", x_shape[1]);
  TORCH_CHECK(plan.tile_rows >= 1, "tiled step: tile_rows must be >= 1, got ", plan.tile_rows);
  layers = model->options.n_layers();
  TORCH_CHECK(plan.inputs.empty() || static_cast<int64_t>(plan.inputs.size()) == layers,
              "tiled step: the plan places ", plan.inputs.size(), " block inputs, the model has ",
              layers, " blocks");
  TORCH_CHECK(plan.gradient != TilePlace::kRecompute,
              "tiled step: the gradient between blocks cannot be recomputed (device or host)");
  spatial = x_shape.slice(2).vec();
  n0 = spatial[0];
  if (band.grid_rows > 0) {
    TORCH_CHECK(band.row0 >= 0 && band.row0 + n0 <= band.grid_rows, "tiled step: a band of ", n0,
                " rows at row ", band.row0, " does not fit a grid of ", band.grid_rows, " rows");
    spatial[0] = band.grid_rows;
  }
  TORCH_CHECK(n0 >= 1, "tiled step: the input has no rows");
  count = (n0 + plan.tile_rows - 1) / plan.tile_rows;
  const auto cd = model->options.compute_dtype();
  dtype = cd == torch::kFloat ? x_options.dtype().toScalarType() : cd;
  const auto options = x_options.dtype(dtype);
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
  const bool same_coords = !coords.empty() && coords_grid == spatial &&
                           coords[0].device() == x_options.device() &&
                           coords[0].scalar_type() == dtype;
  if (model->positional_embedding && !same_coords) {
    coords.clear();
    coords_grid = spatial;
    // linspace(0, 1, res + 1)[:-1] in float32 on the CPU, as GridEmbedding makes them.
    for (const auto s : spatial) {
      coords.push_back(torch::linspace(0.0, 1.0, s + 1)
                           .narrow(0, 0, s)
                           .to(x_options.device(), dtype)
                           .contiguous());
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

// The lifting's input on tile t: its rows of x (or of the source), the grid
// coordinates of the whole grid's rows appended.
// x: [B, Cin, *S] -> [B, Cin + d, rows, *S']
at::Tensor TiledStep::Impl::lift_input(const at::Tensor& x, int64_t t) {
  auto xt = x_rows ? x_rows(r0(t), rows(t)) : rows_of(x, t);
  if (xt.scalar_type() != dtype) xt = xt.to(dtype);
  if (!coords.empty()) {
    const int64_t d = static_cast<int64_t>(spatial.size());
    std::vector<int64_t> shape{xt.size(0), 1, rows(t)};
    shape.insert(shape.end(), spatial.begin() + 1, spatial.end());
    std::vector<at::Tensor> parts{xt};
    for (int64_t i = 0; i < d; ++i) {
      const auto c = i == 0 ? coords[0].narrow(0, g0(t), rows(t)) : coords[static_cast<size_t>(i)];
      std::vector<int64_t> view(static_cast<size_t>(d + 2), 1);
      view[static_cast<size_t>(i + 2)] = c.size(0);
      parts.push_back(c.view(view).expand(shape));
    }
    xt = torch::cat(parts, 1);
  }
  return xt;
}

// Block j's pointwise tail parameters, flattened as the fused kernels take them.
struct TiledStep::Impl::TailWeights {
  at::Tensor w_skip, w1, b1, w2, b2, gate;  // [C, C], [Cm, C], [Cm], [C, Cm], [C], [1, C, 1]
  std::vector<at::Tensor> params;           // the parameters themselves, in that order
};

TiledStep::Impl::TailWeights TiledStep::Impl::weights(int64_t j) {
  auto& blocks = *model->fno_blocks;
  auto& mlp = *blocks.channel_mlp[j]->as<ChannelMLP>();
  const auto& skip = blocks.fno_skips[j]->as<LinearSkip>()->conv->weight;
  const auto& fc0 = *mlp.fcs[0]->as<PointwiseLinear>();
  const auto& fc1 = *mlp.fcs[1]->as<PointwiseLinear>();
  const auto& gate = blocks.channel_mlp_skips[j]->as<SoftGating>()->weight;
  return {skip.squeeze(-1),
          fc0.weight.squeeze(-1),
          fc0.bias,
          fc1.weight.squeeze(-1),
          fc1.bias,
          gate.reshape({1, -1, 1}),
          {skip, fc0.weight, fc0.bias, fc1.weight, fc1.bias, gate}};
}

// The rows of tile t of block j's spectral output: the inverse transform of
// its mixed spectrum y. -> [B, C, rows, *S'] in the activations' type
at::Tensor TiledStep::Impl::spectral(int64_t j, const at::Tensor& y, int64_t t) const {
  return detail::synthesis_tile(modes[static_cast<size_t>(j)], y, g0(t), rows(t), dtype);
}

// Block j's pointwise tail on a tile, to the next block's input GELU(z) (the
// last block: z, for the projection); y1 is not kept. Fused kernels where they
// apply, else LibTorch.
// a, s: [B, C, rows, *S'] -> [B, C, rows, *S']
at::Tensor TiledStep::Impl::tail_next(int64_t j, const at::Tensor& a, const at::Tensor& s) {
  torch::NoGradGuard no_grad;
  const bool mid = j != layers - 1;
  const auto w = weights(j);
  const auto af = a.flatten(2), sf = s.flatten(2);
  if (detail::fused_block_tail_usable(af, sf, w.w_skip, w.w1, w.b1, w.w2, w.b2, w.gate)) {
    return detail::fused_block_tail_next(af, sf, w.w_skip, w.w1, w.b1, w.w2, w.b2, w.gate, mid)
        .view(a.sizes());
  }
  const auto z = block_tail(a, a, s, w.params[0], w.params[1], w.params[2], w.params[3],
                            w.params[4], w.params[5], /*gelu_input=*/false, /*gelu_mid=*/mid);
  return mid ? torch::gelu(z) : z;
}

// The backward of tail_next from g, the gradient of its output: returns
// {da, ds}, and adds the weight gradients (in TailWeights::params' order) to `sums`.
// g, a, s: [B, C, rows, *S'] -> da, ds: [B, C, rows, *S']
std::pair<at::Tensor, at::Tensor> TiledStep::Impl::tail_backward(int64_t j, const at::Tensor& g,
                                                                 const at::Tensor& a,
                                                                 const at::Tensor& s,
                                                                 std::vector<at::Tensor>& sums) {
  const bool mid = j != layers - 1;
  const auto w = weights(j);
  const auto af = a.flatten(2), sf = s.flatten(2);
  std::vector<at::Tensor> grads;
  at::Tensor da, ds;
  if (detail::fused_block_tail_usable(af, sf, w.w_skip, w.w1, w.b1, w.w2, w.b2, w.gate)) {
    auto r = detail::fused_block_tail_backward_recompute(g.flatten(2), af, sf, w.w_skip, w.w1, w.b1,
                                                         w.w2, w.b2, w.gate, mid);
    da = r.da.view(a.sizes());
    ds = r.ds.view(a.sizes());
    grads = {r.w_skip, r.w1, r.b1, r.w2, r.b2, r.gate};
  } else {
    // LibTorch: the tail again with gradients, and autograd's.
    torch::AutoGradMode grad_mode(true);
    const auto al = a.detach().requires_grad_(true), sl = s.detach().requires_grad_(true);
    auto z = block_tail(al, al, sl, w.params[0], w.params[1], w.params[2], w.params[3], w.params[4],
                        w.params[5], /*gelu_input=*/false, /*gelu_mid=*/mid);
    if (mid) z = torch::gelu(z);
    std::vector<at::Tensor> inputs{al, sl};
    inputs.insert(inputs.end(), w.params.begin(), w.params.end());
    auto all = torch::autograd::grad({z}, inputs, {g});
    da = all[0];
    ds = all[1];
    grads.assign(all.begin() + 2, all.end());
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto gi = grads[i].view(w.params[i].sizes());
    sums[i] = sums[i].defined() ? sums[i].add_(gi) : gi.clone();
  }
  return {da, ds};
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
  for (int64_t m = k; m < j; ++m) a = block(m, a, t);
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

// Backward: announces the reads of sweep j - 1's input while sweep j still
// runs, so that its first tile is on the device when it starts (one tile: the
// plans' estimates count it). Only where sweep j - 1 reads another store than
// sweep j (a store's reads restart with each announcement). Returns whether
// the store took it.
bool TiledStep::Impl::expect_next_inputs_early(int64_t j) {
  if (j < 1) return false;
  const int64_t next = source(j - 1);
  if (next < 0) return false;
  const bool reads_latest = static_cast<int64_t>(latest.size()) == count;
  if (!reads_latest && source(j) == next) return false;
  return stores[static_cast<size_t>(next)]->expect_early(all_tiles(count), 1);
}

void TiledStep::Impl::keep(int64_t j, int64_t t, const at::Tensor& a,
                           std::vector<at::Tensor>& next_latest) {
  // With keep_latest the last block's input is read from `latest` only (its
  // forward sweep, and backward's first sweep in training): never stored.
  const bool stored = !(plan.keep_latest && j == layers - 1);
  if (auto& store = stores[static_cast<size_t>(j)]; store && stored) {
    if (plan.keep_latest) {
      store->put_held(t, a);
    } else {
      store->put(t, a);
    }
  }
  if (plan.keep_latest) next_latest[static_cast<size_t>(t)] = a;
}

// The lifting's sweep: a_0 per tile, and its share of block 0's spectrum.
at::Tensor TiledStep::Impl::lifting_sweep(const at::Tensor& x, std::vector<at::Tensor>& next) {
  at::Tensor sum;
  for (int64_t t = 0; t < count; ++t) {
    const auto a = lift(x, t);
    const auto part = detail::analysis_tile(modes[0], a, g0(t));
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
  reduce(X[0]);
  Y[0] = detail::mix_modes(conv0, modes[0], X[0], true);
  latest = std::move(next);
  // The output, whole, unless a sink takes its tiles.
  at::Tensor out;
  if (!sink) {
    auto out_shape = x.sizes().vec();
    out_shape[1] = model->options.out_channels();
    const auto param_type = model->projection->fcs[0]->as<PointwiseLinear>()->weight.scalar_type();
    out = torch::empty(out_shape, x.options().dtype(param_type));
  }
  for (int64_t j = 0; j < layers; ++j) {
    const bool last = j == layers - 1;
    // Training keeps the last block's input (all of it is on the device at
    // this sweep's start) for backward's first sweep, which then reads nothing
    // over the link and remakes nothing; as that sweep drops its tiles, the
    // gradient store fills by as much.
    const bool hold = training && last && plan.keep_latest;
    // A sink may read its tiles on the host: the forward's sums (all of them
    // are before the last sweep) done first.
    if (last && sink) band.drain();
    if (!plan.keep_latest) latest.clear();
    expect_inputs(j);
    next.assign(static_cast<size_t>(count), at::Tensor());
    at::Tensor sum;
    for (int64_t t = 0; t < count; ++t) {
      // the next block's input, or z
      const auto a = block(j, hold ? latest[static_cast<size_t>(t)] : input(x, j, t), t);
      if (last) {
        if (sink) {
          sink(r0(t), project(a, t));
        } else {
          rows_of(out, t).copy_(project(a, t));
        }
        continue;
      }
      const auto part = detail::analysis_tile(modes[static_cast<size_t>(j + 1)], a, g0(t));
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
    if (!hold) latest = std::move(next);
    if (!last) {
      const auto& conv = *model->fno_blocks->convs[j + 1]->as<SpectralConv>();
      reduce(sum);
      X[static_cast<size_t>(j + 1)] = sum;
      Y[static_cast<size_t>(j + 1)] =
          detail::mix_modes(conv, modes[static_cast<size_t>(j + 1)], sum, true);
    }
  }
  if (!training || !plan.keep_latest) latest.clear();
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
// sweep remakes each tile's spectral output s from the block's mixed spectrum,
// takes the gradient at the block's output (the last block: through the
// projection; the others: the next block's input's, whose tail part is in the
// gradient store and whose spectral part is the adjoint of that block's
// analysis applied to its spectrum's gradient), and backpropagates through the
// tail (y1, the hidden layer and z recomputed): the gradient at its own input's
// tail part goes to the store, s's gradient into the block's spectrum's (the
// synthesis' adjoint), the weights' into their .grad.
void TiledStep::Impl::backward_sweeps(const at::Tensor& x, const at::Tensor& d_out) {
  torch::NoGradGuard no_grad;
  const auto projection = mlp2_params(model->projection);
  TileStore* g_read = gradients[0].get();
  TileStore* g_write = gradients[1].get();  // null on the device: in place
  at::Tensor d_next;       // the gradient of the next block's spectrum (before mixing)
  int64_t announced = -1;  // the sweep whose input reads were announced early
  for (int64_t j = layers - 1; j >= 0; --j) {
    const bool last = j == layers - 1;
    if (announced != j) expect_inputs(j);
    if (!last) g_read->expect(all_tiles(count));
    auto& g_out = g_write != nullptr ? *g_write : *g_read;
    std::vector<at::Tensor> sums(6);          // the tail's weight gradients over the tiles
    std::vector<at::Tensor> projection_sums;  // the projection's (last: two-layer MLP)
    at::Tensor dy;                            // the mixed spectrum's gradient
    for (int64_t t = 0; t < count; ++t) {
      auto a = input(x, j, t);
      auto s = spectral(j, Y[static_cast<size_t>(j)], t);
      at::Tensor g;
      if (last && !projection.empty()) {
        // The projection's backward from z remade (its forward is not needed:
        // the backward remakes its hidden layer from z).
        const auto z = tail_next(j, a, s);
        auto dz = rows_of(d_out, t);
        if (dz.scalar_type() != z.scalar_type()) dz = dz.to(z.scalar_type());
        auto r = channel_mlp2_backward(z, dz, projection[0], projection[1], projection[2],
                                       projection[3], /*gelu_input=*/false, /*need_dx=*/true);
        g = std::move(r.dx);
        add_mlp2_grads(projection_sums, r);
      } else if (last) {
        // The projection with gradients, from z remade.
        torch::AutoGradMode grad_mode(true);
        const auto z = tail_next(j, a, s).requires_grad_(true);
        torch::autograd::backward({project(z, t)}, {rows_of(d_out, t)});
        g = z.grad();
      } else {
        // The tile is ours (a fresh reload, or the device store's, which da
        // replaces): the spectral part adds into it.
        g = g_read->get(t);
        detail::analysis_tile_adjoint_add(modes[static_cast<size_t>(j + 1)], d_next, g0(t), g);
      }
      auto [da, ds] = tail_backward(j, g, a, s, sums);
      // Only da and ds are needed from here: the tile's other tensors go first.
      a = at::Tensor();
      s = at::Tensor();
      g = at::Tensor();
      g_out.put(t, da);
      da = at::Tensor();
      const auto part = detail::synthesis_tile_adjoint(modes[static_cast<size_t>(j)], ds, g0(t));
      dy = dy.defined() ? dy.add_(part) : part;
      // The next sweep's first tile comes in during this sweep's last two.
      if (t == std::max<int64_t>(count - 3, 0) && expect_next_inputs_early(j)) announced = j - 1;
    }
    // The tail's weights, once per sweep, through autograd (gradient hooks fire).
    backward_params(weights(j).params, sums);
    if (last) backward_params(projection, projection_sums);
    if (stores[static_cast<size_t>(j)]) stores[static_cast<size_t>(j)]->clear();
    latest.clear();  // (the last block's input, held from forward: read)
    {
      // The band's share of dy: the mixing's weight gradients are this band's
      // share too, and its input gradient is added over the ranks.
      torch::AutoGradMode grad_mode(true);
      d_next = mix_backward(j, dy);
    }
    reduce(d_next);
    if (g_write != nullptr) std::swap(g_read, g_write);
  }
  lifting_backward(x, *g_read, d_next);
}

// The lifting's sweep in backward: its output's gradient is block 0's input's
// (the tail part in `g_read`, the spectral part from d_next, block 0's
// spectrum's gradient). A two-layer lifting MLP's backward runs from the tile's
// input alone (it remakes its hidden layer), without its forward.
void TiledStep::Impl::lifting_backward(const at::Tensor& x, TileStore& g_read,
                                       const at::Tensor& d_next) {
  g_read.expect(all_tiles(count));
  const auto params = mlp2_params(model->lifting);
  std::vector<at::Tensor> sums;
  for (int64_t t = 0; t < count; ++t) {
    auto g = g_read.get(t);
    detail::analysis_tile_adjoint_add(modes[0], d_next, g0(t), g);
    if (params.empty()) {
      torch::AutoGradMode grad_mode(true);
      torch::autograd::backward({lift(x, t)}, {g});
      continue;
    }
    add_mlp2_grads(sums, channel_mlp2_backward(lift_input(x, t), g, params[0], params[1], params[2],
                                               params[3], /*gelu_input=*/false,
                                               /*need_dx=*/false));
  }
  backward_params(params, sums);
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

void TiledStep::set_band(Band band) {
  TORCH_CHECK(band.ranks >= 1 && band.rank >= 0 && band.rank < band.ranks, "tiled step: band rank ",
              band.rank, " of ", band.ranks);
  TORCH_CHECK(!band.split() || band.sum != nullptr, "tiled step: a band over ", band.ranks,
              " ranks needs a sum");
  TORCH_CHECK(band.grid_rows > 0 || band.row0 == 0, "tiled step: a band at row ", band.row0,
              " needs grid_rows");
  p_->band = std::move(band);
}

const Band& TiledStep::band() const { return p_->band; }

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
    p.band.drain();  // the step's sums done before anything reads its results
    p.finish_step();
    return l.detach();
  } catch (...) {
    p.finish_step();
    throw;
  }
}

at::Tensor TiledStep::forward(const at::Tensor& x) {
  // (the streamed forward, from x's rows into the output's)
  auto out_shape = x.sizes().vec();
  TORCH_CHECK(out_shape.size() >= 3, "tiled step: expected an input [B, C, *S], got shape ",
              x.sizes());
  out_shape[1] = p_->model->options.out_channels();
  const auto param_type =
      p_->model->projection->fcs[0]->as<PointwiseLinear>()->weight.scalar_type();
  auto out = torch::empty(out_shape, x.options().dtype(param_type));
  TileSource source;
  source.shape = x.sizes().vec();
  source.options = x.options();
  source.rows = [&x](int64_t r0, int64_t rows) { return x.narrow(2, r0, rows); };
  forward(source, [&out](int64_t r0, const at::Tensor& tile) {
    out.narrow(2, r0, tile.size(2)).copy_(tile);
  });
  return out;
}

void TiledStep::forward(const TileSource& x, const TileSink& out) {
  auto& p = *p_;
  TORCH_CHECK(x.rows && out, "tiled step: a streamed forward needs a source and a sink");
  p.setup(x.shape, x.options);
  p.x_rows = x.rows;
  p.sink = out;
  try {
    p.forward_sweeps(at::Tensor(), /*training=*/false);
    p.x_rows = nullptr;
    p.sink = nullptr;
    p.finish_step();
  } catch (...) {
    p.x_rows = nullptr;
    p.sink = nullptr;
    p.finish_step();
    throw;
  }
}

}  // namespace fno
