#include <fno/layers.h>

#include <torch/torch.h>

#include <cfenv>
#include <cmath>

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

torch::Tensor PointwiseLinearImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() >= 3, "PointwiseLinear: expected input [B, C, *S], got shape ", x.sizes());
  TORCH_CHECK(x.size(1) == options.in_channels(), "PointwiseLinear: expected ",
              options.in_channels(), " input channels, got ", x.size(1));
  auto out_shape = x.sizes().vec();
  out_shape[1] = options.out_channels();
  // [Cout, Cin] @ [B, Cin, N] -> [B, Cout, N]: channel mixing as one batched GEMM.
  auto y = torch::matmul(weight.squeeze(-1), x.flatten(2));
  if (bias.defined()) y = y + bias.unsqueeze(-1);
  return y.view(out_shape);
}

// ---------------------------------------------------------------------------
// ChannelMLP
// ---------------------------------------------------------------------------
ChannelMLPImpl::ChannelMLPImpl(const ChannelMLPOptions& options_) : options(options_) {
  reset();
}

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
  stream << "fno::ChannelMLP(in=" << options.in_channels() << ", hidden="
         << options.hidden_channels() << ", out=" << options.out_channels()
         << ", n_layers=" << options.n_layers() << ")";
}

torch::Tensor ChannelMLPImpl::forward(torch::Tensor x) {
  const int64_t n = static_cast<int64_t>(fcs->size());
  for (int64_t i = 0; i < n; ++i) {
    x = fcs[i]->as<PointwiseLinear>()->forward(x);
    if (i < n - 1) x = torch::gelu(x);
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
  conv = register_module("conv",
                         PointwiseLinear(PointwiseLinearOptions(in_channels, out_channels).bias(false)));
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
  weight = register_module("weight", DenseTensor(weight_shape()));
  {
    torch::NoGradGuard no_grad;
    // Complex normal: real and imaginary parts each N(0, std^2 / 2), as torch's normal_.
    weight->tensor.normal_(0.0, init_std);
  }
  if (options.bias()) {
    bias = register_parameter(
        "bias", init_std * torch::randn(singleton_dims(options.out_channels(), 1, n_dim - 1)));
  } else {
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
}

void SpectralConvImpl::pretty_print(std::ostream& stream) const {
  stream << "fno::SpectralConv(" << options.in_channels() << ", " << options.out_channels()
         << ", n_modes=" << torch::IntArrayRef(options.n_modes()) << ")";
}

torch::Tensor SpectralConvImpl::forward(const torch::Tensor& x) {
  const auto n_dim = static_cast<int64_t>(options.n_modes().size());
  TORCH_CHECK(x.dim() == n_dim + 2, "SpectralConv: expected a ", n_dim + 2,
              "-d input [B, C, *S], got shape ", x.sizes());
  TORCH_CHECK(x.size(1) == options.in_channels(), "SpectralConv: expected ",
              options.in_channels(), " input channels, got ", x.size(1));
  const auto spatial = x.sizes().slice(2).vec();
  std::vector<int64_t> fft_dims(n_dim);
  for (int64_t i = 0; i < n_dim; ++i) fft_dims[i] = i + 2;

  // x_ft: [B, Cin, n1, ..., n_last//2+1]
  auto x_ft = torch::fft::rfftn(x, c10::nullopt, fft_dims, "forward");

  // Gather the kept modes in centred order (frequencies -k//2 .. k-k//2-1), and
  // the matching weight slice, dim by dim.
  auto w = weight->tensor;
  auto x_kept = x_ft;
  std::vector<int64_t> kept(n_dim);
  for (int64_t i = 0; i < n_dim; ++i) {
    const int64_t dim = i + 2;
    const int64_t n = x_ft.size(dim);
    const int64_t m = w.size(dim);
    const int64_t k = std::min(n, m);
    kept[i] = k;
    if (i < n_dim - 1) {
      // neuraloperator's centred sub-slice: weight[s//2 : m - ceil(s/2)], s = m - k.
      w = w.narrow(dim, (m - k) / 2, k);
      const int64_t neg = k / 2;
      const int64_t pos = k - neg;
      x_kept = torch::cat({x_kept.narrow(dim, n - neg, neg), x_kept.narrow(dim, 0, pos)}, dim);
    } else {
      w = w.narrow(dim, 0, k);
      x_kept = x_kept.narrow(dim, 0, k);
    }
  }

  // Channel mixing per mode: [B, Cin, K...] x [Cin, Cout, K...] -> [B, Cout, K...]
  static const char* kEquations[] = {"bix,iox->box", "bixy,ioxy->boxy",
                                     "bixyz,ioxyz->boxyz"};
  auto out = torch::einsum(kEquations[n_dim - 1], {x_kept, w});

  // Scatter back into the full half-spectrum, zero elsewhere.
  {
    const int64_t dim = n_dim + 1;
    const int64_t n = x_ft.size(dim);
    if (kept.back() < n) {
      auto shape = out.sizes().vec();
      shape[dim] = n - kept.back();
      out = torch::cat({out, torch::zeros(shape, out.options())}, dim);
    }
  }
  for (int64_t i = 0; i < n_dim - 1; ++i) {
    const int64_t dim = i + 2;
    const int64_t n = spatial[i];
    const int64_t k = kept[i];
    const int64_t neg = k / 2;
    const int64_t pos = k - neg;
    std::vector<torch::Tensor> parts{out.narrow(dim, neg, pos)};
    if (k < n) {
      auto shape = out.sizes().vec();
      shape[dim] = n - k;
      parts.push_back(torch::zeros(shape, out.options()));
    }
    parts.push_back(out.narrow(dim, 0, neg));
    out = torch::cat(parts, dim);
  }

  auto y = torch::fft::irfftn(out, spatial, fft_dims, "forward");
  if (bias.defined()) y = y + bias;
  return y;
}

// ---------------------------------------------------------------------------
// GridEmbedding
// ---------------------------------------------------------------------------
GridEmbeddingImpl::GridEmbeddingImpl(int64_t n_dim_) : n_dim(n_dim_) {
  TORCH_CHECK(n_dim >= 1 && n_dim <= 3, "GridEmbedding: n_dim must be 1, 2 or 3, got ", n_dim);
}

torch::Tensor GridEmbeddingImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == n_dim + 2, "GridEmbedding: expected a ", n_dim + 2,
              "-d input [B, C, *S], got shape ", x.sizes());
  const auto spatial = x.sizes().slice(2);
  std::vector<torch::Tensor> parts{x};
  for (int64_t i = 0; i < n_dim; ++i) {
    // Coordinates linspace(0, 1, res + 1)[:-1], computed in float32 on the CPU
    // as neuraloperator does, then moved and broadcast.
    auto coords = torch::linspace(0.0, 1.0, spatial[i] + 1).narrow(0, 0, spatial[i]);
    coords = coords.to(x.device(), x.scalar_type());
    std::vector<int64_t> view(n_dim + 2, 1);
    view[i + 2] = spatial[i];
    auto shape = x.sizes().vec();
    shape[1] = 1;
    parts.push_back(coords.view(view).expand(shape));
  }
  return torch::cat(parts, 1);
}

}  // namespace fno
