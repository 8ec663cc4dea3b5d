// The FNO's modules (fno/layers.h): PointwiseLinear, ChannelMLP, SoftGating,
// LinearSkip, SpectralConv and GridEmbedding. Their pointwise parts' autograd
// functions are in pointwise_autograd.cpp, the spectral transforms in
// spectral.cpp.
#include <fno/layers.h>

#include <fno/band.h>
#include <fno/fused.h>
#include "spectral.h"

#include <torch/torch.h>

#include <cmath>
#include <mutex>
#include <vector>

namespace fno {

int64_t round_half_even(double x) {
  // std::nearbyint honours the current rounding mode; the default, FE_TONEAREST,
  // is round-half-to-even, which is what Python's round() does.
  return static_cast<int64_t>(std::nearbyint(x));
}

namespace {

std::vector<int64_t> singleton_dims(int64_t leading, int64_t channels, int64_t n_dim) {
  std::vector<int64_t> shape{leading, channels};
  shape.insert(shape.end(), n_dim, 1);
  return shape;
}

}  // namespace

// ---------------------------------------------------------------------------
// PointwiseLinear
// ---------------------------------------------------------------------------
PointwiseLinearImpl::PointwiseLinearImpl(const PointwiseLinearOptions& options_)
    : options(options_) {
  reset();
}

void PointwiseLinearImpl::reset() {
  TORCH_CHECK(options.in_channels() > 0, "PointwiseLinear: in_channels must be > 0, got ",
              options.in_channels());
  TORCH_CHECK(options.out_channels() > 0, "PointwiseLinear: out_channels must be > 0, got ",
              options.out_channels());
  weight = register_parameter("weight",
                              torch::empty({options.out_channels(), options.in_channels(), 1}));
  if (options.bias()) {
    bias = register_parameter("bias", torch::empty({options.out_channels()}));
  } else {
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
  reset_parameters();
}

void PointwiseLinearImpl::reset_parameters() {
  // nn.Conv1d's default: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
  // and the same bound for the bias.
  torch::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(options.in_channels()));
  weight.uniform_(-bound, bound);
  if (bias.defined()) bias.uniform_(-bound, bound);
}

void PointwiseLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "fno::PointwiseLinear(" << options.in_channels() << ", " << options.out_channels()
         << ", bias=" << (options.bias() ? "true" : "false") << ")";
}

torch::Tensor PointwiseLinearImpl::forward(const torch::Tensor& x) { return forward(x, false); }

torch::Tensor PointwiseLinearImpl::forward(const torch::Tensor& x, bool gelu_input) {
  TORCH_CHECK(x.dim() >= 3 && x.size(1) == options.in_channels(), "PointwiseLinear: expected ",
              options.in_channels(), " input channels in [B, C, *S], got shape ", x.sizes());
  return pointwise_linear(x, weight, bias, gelu_input);
}

// ---------------------------------------------------------------------------
// ChannelMLP
// ---------------------------------------------------------------------------
ChannelMLPImpl::ChannelMLPImpl(const ChannelMLPOptions& options_) : options(options_) { reset(); }

void ChannelMLPImpl::reset() {
  const int64_t n = options.n_layers();
  TORCH_CHECK(n >= 1, "ChannelMLP: n_layers must be >= 1, got ", n);
  fcs = register_module("fcs", torch::nn::ModuleList());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t cin = i == 0 ? options.in_channels() : options.hidden_channels();
    const int64_t cout = i == n - 1 ? options.out_channels() : options.hidden_channels();
    fcs->push_back(PointwiseLinear(cin, cout));
  }
}

void ChannelMLPImpl::pretty_print(std::ostream& stream) const {
  stream << "fno::ChannelMLP(in=" << options.in_channels()
         << ", hidden=" << options.hidden_channels() << ", out=" << options.out_channels()
         << ", n_layers=" << options.n_layers() << ")";
}

torch::Tensor ChannelMLPImpl::forward(torch::Tensor x) { return forward(std::move(x), false); }

torch::Tensor ChannelMLPImpl::forward(torch::Tensor x, bool gelu_input) {
  const int64_t n = static_cast<int64_t>(fcs->size());
  // On CUDA with the fused kernels on, plain training stores what the slim
  // level stores, as the fused block tail does: the lifting's hidden layer is
  // remade from its 3-channel input for less than storing it costs, and the
  // projection's for about the same, while each would hold 2x a block's tensor.
  if (n == 2 && (recompute_cheap() || (x.is_cuda() && fused_kernels_enabled()))) {
    // One function that stores only x and recomputes the hidden layer.
    const auto& l0 = *fcs[0]->as<PointwiseLinear>();
    const auto& l1 = *fcs[1]->as<PointwiseLinear>();
    return channel_mlp2(x, l0.weight, l0.bias, l1.weight, l1.bias, gelu_input);
  }
  // Each GELU runs inside the next layer (PointwiseLinear::forward(x, true)),
  // which keeps only its input for backward.
  for (int64_t i = 0; i < n; ++i) {
    x = fcs[i]->as<PointwiseLinear>()->forward(x, i > 0 || gelu_input);
  }
  return x;
}

// ---------------------------------------------------------------------------
// SoftGating
// ---------------------------------------------------------------------------
SoftGatingImpl::SoftGatingImpl(int64_t channels_, int64_t n_dim_)
    : channels(channels_), n_dim(n_dim_) {
  reset();
}

void SoftGatingImpl::reset() {
  TORCH_CHECK(channels > 0, "SoftGating: channels must be > 0, got ", channels);
  weight = register_parameter("weight", torch::ones(singleton_dims(1, channels, n_dim)));
}

void SoftGatingImpl::pretty_print(std::ostream& stream) const {
  stream << "fno::SoftGating(" << channels << ")";
}

torch::Tensor SoftGatingImpl::forward(const torch::Tensor& x) { return weight * x; }

// ---------------------------------------------------------------------------
// LinearSkip
// ---------------------------------------------------------------------------
LinearSkipImpl::LinearSkipImpl(int64_t in_channels_, int64_t out_channels_)
    : in_channels(in_channels_), out_channels(out_channels_) {
  reset();
}

void LinearSkipImpl::reset() {
  conv = register_module(
      "conv", PointwiseLinear(PointwiseLinearOptions(in_channels, out_channels).bias(false)));
}

torch::Tensor LinearSkipImpl::forward(const torch::Tensor& x) { return conv->forward(x); }

// ---------------------------------------------------------------------------
// SpectralConv
// ---------------------------------------------------------------------------
DenseTensorImpl::DenseTensorImpl(std::vector<int64_t> shape_) : shape(std::move(shape_)) {
  reset();
}

void DenseTensorImpl::reset() {
  tensor = register_parameter("tensor", torch::empty(shape, torch::kComplexFloat));
}

SpectralConvImpl::SpectralConvImpl(const SpectralConvOptions& options_) : options(options_) {
  reset();
}

std::vector<int64_t> SpectralConvImpl::weight_shape() const {
  std::vector<int64_t> shape{options.in_channels(), options.out_channels()};
  shape.insert(shape.end(), options.n_modes().begin(), options.n_modes().end());
  shape.back() = shape.back() / 2 + 1;  // real FFT: the last dim keeps m//2 + 1 modes
  return shape;
}

void SpectralConvImpl::reset() {
  const auto& modes = options.n_modes();
  TORCH_CHECK(!modes.empty() && modes.size() <= 3,
              "SpectralConv: n_modes must have 1, 2 or 3 entries, got ", modes.size());
  for (auto m : modes) TORCH_CHECK(m > 0, "SpectralConv: every n_modes entry must be > 0, got ", m);
  TORCH_CHECK(options.in_channels() > 0 && options.out_channels() > 0,
              "SpectralConv: channels must be > 0, got in=", options.in_channels(),
              " out=", options.out_channels());
  const auto n_dim = static_cast<int64_t>(modes.size());
  const double init_std =
      std::sqrt(2.0 / static_cast<double>(options.in_channels() + options.out_channels()));
  const bool paper = options.init() == SpectralInit::kPaper;
  weight = register_module("weight", DenseTensor(weight_shape()));
  {
    torch::NoGradGuard no_grad;
    if (paper) {
      // scale * torch.rand(..., dtype=cfloat): both parts uniform on [0, scale).
      const double scale =
          1.0 / static_cast<double>(options.in_channels() * options.out_channels());
      torch::view_as_real(weight->tensor).uniform_(0.0, scale);
    } else {
      // Complex normal: real and imaginary parts each N(0, std^2 / 2), as torch's normal_.
      weight->tensor.normal_(0.0, init_std);
    }
  }
  if (options.bias()) {
    const auto shape = singleton_dims(options.out_channels(), 1, n_dim - 1);
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.in_channels()));
    bias = register_parameter("bias", paper ? torch::empty(shape).uniform_(-bound, bound)
                                            : init_std * torch::randn(shape));
  } else {
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
}

void SpectralConvImpl::pretty_print(std::ostream& stream) const {
  stream << "fno::SpectralConv(" << options.in_channels() << ", " << options.out_channels()
         << ", n_modes=" << torch::IntArrayRef(options.n_modes()) << ")";
}

torch::Tensor SpectralConvImpl::forward(const torch::Tensor& x) { return forward(x, true); }

torch::Tensor SpectralConvImpl::forward(const torch::Tensor& x, bool add_bias) {
  const auto n_dim = static_cast<int64_t>(options.n_modes().size());
  TORCH_CHECK(x.dim() == n_dim + 2, "SpectralConv: expected a ", n_dim + 2,
              "-d input [B, C, *S], got shape ", x.sizes());
  TORCH_CHECK(x.size(1) == options.in_channels(), "SpectralConv: expected ", options.in_channels(),
              " input channels, got ", x.size(1));
  // On a band of rows (BandGuard): the band's share of the spectrum, summed over ranks.
  if (const Band* band = current_band()) return detail::band_forward(*this, *band, x, add_bias);
  const auto m = detail::spectral_modes(*this, x.sizes().slice(2), x.options());
  // Forward transform, one dim at a time so each transform only sees modes
  // that are kept: the real DFT along the last dim, truncated, then complex
  // FFTs along the others, gathering the kept corners (the first dim's as one
  // complex GEMM when few are kept). Equals rfftn(norm="forward").
  // x: [B, Cin, *S] -> [B, Cin, *K] complex
  const auto x_ft = detail::corner_dims_forward(m, detail::last_dim_forward(m, x), 0);
  // [B, Cin, *K] -> [B, Cout, *K], the bias in the zero mode
  auto out = detail::mix_modes(*this, m, x_ft, add_bias);
  // Inverse, mirroring the forward: scatter each dim's corners back between
  // zeros and inverse-FFT it, then the real inverse of the last dim. Equals
  // irfftn(s=spatial, norm="forward") of the zero-filled full spectrum.
  // [B, Cout, *K] -> [B, Cout, *S]
  return detail::last_dim_inverse(m, detail::corner_dims_inverse(m, out, 0), x.scalar_type());
}

// ---------------------------------------------------------------------------
// GridEmbedding
// ---------------------------------------------------------------------------
GridEmbeddingImpl::GridEmbeddingImpl(int64_t n_dim_) : n_dim(n_dim_) {
  TORCH_CHECK(n_dim >= 1 && n_dim <= 3, "GridEmbedding: n_dim must be 1, 2 or 3, got ", n_dim);
}

namespace {

// The coordinate channels [1, d, n, *S'] of rows [row0, row0 + n) of a grid of
// grid_rows rows (n = spatial[0]; the whole grid: row0 0, grid_rows n):
// linspace(0, 1, res + 1)[:-1] per dim, computed in float32 on the CPU as
// neuraloperator does.
torch::Tensor coordinate_channels(torch::IntArrayRef spatial, int64_t row0, int64_t grid_rows) {
  const auto n_dim = static_cast<int64_t>(spatial.size());
  std::vector<torch::Tensor> channels;
  std::vector<int64_t> shape{1, 1};
  shape.insert(shape.end(), spatial.begin(), spatial.end());
  for (int64_t i = 0; i < n_dim; ++i) {
    const int64_t rows = i == 0 ? grid_rows : spatial[i];
    auto coords = torch::linspace(0.0, 1.0, rows + 1).narrow(0, 0, rows);
    if (i == 0) coords = coords.narrow(0, row0, spatial[0]);
    std::vector<int64_t> view(static_cast<size_t>(n_dim + 2), 1);
    view[static_cast<size_t>(i + 2)] = spatial[i];
    channels.push_back(coords.view(view).expand(shape));
  }
  return torch::cat(channels, 1);
}

// The coordinate channels of a band's rows (BandGuard), the first dim's the
// whole grid's rows [row0, row0 + n). The last few are kept (as GridEmbedding
// keeps a whole grid's), so that a step makes no host-to-device copy; they
// depend on the grid alone, not on the module.
torch::Tensor band_grid(const Band& band, torch::IntArrayRef spatial, const torch::Device& device,
                        c10::ScalarType dtype) {
  struct Entry {
    std::vector<int64_t> key;
    torch::Tensor grid;
  };
  static std::mutex mu;
  static std::vector<Entry> kept;
  constexpr size_t kKept = 4;
  std::vector<int64_t> key{band.row0, band.grid_rows};
  key.insert(key.end(), spatial.begin(), spatial.end());
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& e : kept) {
    if (e.key == key && e.grid.device() == device && e.grid.scalar_type() == dtype) return e.grid;
  }
  auto grid = coordinate_channels(spatial, band.row0, band.grid_rows).to(device, dtype);
  if (kept.size() == kKept) kept.erase(kept.begin());
  kept.push_back({std::move(key), grid});
  return grid;
}

}  // namespace

torch::Tensor GridEmbeddingImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == n_dim + 2, "GridEmbedding: expected a ", n_dim + 2,
              "-d input [B, C, *S], got shape ", x.sizes());
  const auto spatial = x.sizes().slice(2);
  if (const Band* band = current_band()) {
    // x: [B, C, n, *S'], rows [row0, row0 + n) of the grid -> [B, C + d, n, *S']
    TORCH_CHECK(band->row0 + spatial[0] <= band->grid_rows, "GridEmbedding: a band of ", spatial[0],
                " rows at row ", band->row0, " does not fit a grid of ", band->grid_rows, " rows");
    const auto grid = band_grid(*band, spatial, x.device(), x.scalar_type());
    auto shape = grid.sizes().vec();
    shape[0] = x.size(0);
    return torch::cat({x, grid.expand(shape)}, 1);
  }
  const auto it = std::find_if(grids_.begin(), grids_.end(), [&](const torch::Tensor& g) {
    return g.sizes().slice(2) == spatial && g.device() == x.device() &&
           g.scalar_type() == x.scalar_type();
  });
  torch::Tensor grid = it != grids_.end() ? *it : torch::Tensor();
  if (!grid.defined()) {
    // Made once on the CPU, then moved once.
    grid = coordinate_channels(spatial, 0, spatial[0]).to(x.device(), x.scalar_type());
    grids_.push_back(grid);
  }
  auto shape = grid.sizes().vec();
  shape[0] = x.size(0);
  return torch::cat({x, grid.expand(shape)}, 1);
}

}  // namespace fno
