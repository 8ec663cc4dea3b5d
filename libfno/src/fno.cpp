#include <fno/band.h>
#include <fno/fno.h>
#include <fno/fused.h>

#include <torch/torch.h>

#include <fno/overrides.h>

#include <numeric>

namespace fno {

// ---------------------------------------------------------------------------
// FNOBlocks
// ---------------------------------------------------------------------------
FNOBlocksImpl::FNOBlocksImpl(FNOBlocksOptions options_) : options(std::move(options_)) { reset(); }

void FNOBlocksImpl::reset() {
  const auto channels = options.channels();
  const auto& n_modes = options.n_modes();
  const auto n_layers = options.n_layers();
  const auto expansion = options.channel_mlp_expansion();
  const bool use_channel_mlp = options.use_channel_mlp();
  TORCH_CHECK(n_layers >= 1, "FNO: n_layers must be >= 1, got ", n_layers);
  TORCH_CHECK(!(options.single_gelu() && use_channel_mlp),
              "FNO: single_gelu applies to blocks without channel MLPs (use_channel_mlp false)");
  TORCH_CHECK(expansion > 0, "FNO: channel_mlp_expansion must be > 0, got ", expansion);
  const auto n_dim = static_cast<int64_t>(n_modes.size());
  const int64_t mlp_hidden = round_half_even(static_cast<double>(channels) * expansion);
  TORCH_CHECK(mlp_hidden > 0, "FNO: round(hidden_channels * channel_mlp_expansion) is 0 for ",
              "hidden_channels=", channels, ", channel_mlp_expansion=", expansion);
  convs = register_module("convs", torch::nn::ModuleList());
  fno_skips = register_module("fno_skips", torch::nn::ModuleList());
  channel_mlp = register_module("channel_mlp", torch::nn::ModuleList());
  channel_mlp_skips = register_module("channel_mlp_skips", torch::nn::ModuleList());
  for (int64_t i = 0; i < n_layers; ++i) {
    convs->push_back(SpectralConv(
        SpectralConvOptions(channels, channels, n_modes).init(options.spectral_init())));
    fno_skips->push_back(LinearSkip(channels, channels));
    if (!use_channel_mlp) continue;
    channel_mlp->push_back(ChannelMLP(ChannelMLPOptions(channels, channels, mlp_hidden)));
    channel_mlp_skips->push_back(SoftGating(channels, n_dim));
  }
}

torch::Tensor FNOBlocksImpl::forward(const torch::Tensor& x, int64_t index) {
  const auto n_layers = options.n_layers();
  TORCH_CHECK(index >= 0 && index < n_layers, "FNOBlocks: block index ", index,
              " out of range [0, ", n_layers, ")");
  // Blocks pass pre-activations: the GELU that neuraloperator applies at the
  // end of block i-1 runs at the start of block i, so a block that stores its
  // input stores one tensor for both (see recompute_cheap()).
  // x: [B, C, *S] (block 0: the lifting's output; else block i-1's z) -> z: [B, C, *S]
  const bool first = index == 0;
  const bool last = index == n_layers - 1;
  auto& conv = *convs[index]->as<SpectralConv>();
  const auto& skip_w = fno_skips[index]->as<LinearSkip>()->conv->weight;
  // (null without channel MLPs: the plain chain below, its last step GELU alone)
  auto* mlp = options.use_channel_mlp() ? channel_mlp[index]->as<ChannelMLP>() : nullptr;
  // The fused CUDA block tail (fno/fused.h) stores 2 tensors, as the slim
  // path does, and is faster than the chain below: plain training takes it too.
  const bool tail =
      mlp != nullptr &&
      (recompute_cheap() ||
       fused_block_tail_applies(x, options.channels(), mlp->options.hidden_channels())) &&
      mlp->fcs->size() == 2;
  if (tail) {
    // a = GELU(x) read by the spectral conv and the tail: gelu_fork adds their
    // gradients inside GELU's backward (FNO_GELU_FORK=0: autograd's add).
    static const bool fork = fno::override_on("FNO_GELU_FORK");
    torch::Tensor a = x, a_tail = x;
    if (!first && fork) {
      const auto forked = gelu_fork(x);
      a = forked[0];
      a_tail = forked[1];
    } else if (!first) {
      a = a_tail = torch::gelu(x);
    }
    // The spectral conv carries its bias in its zero mode.
    const auto s = conv.forward(a, /*add_bias=*/true);
    const auto& fc0 = *mlp->fcs[0]->as<PointwiseLinear>();
    const auto& fc1 = *mlp->fcs[1]->as<PointwiseLinear>();
    return block_tail(x, a_tail, s, skip_w, fc0.weight, fc0.bias, fc1.weight, fc1.bias,
                      channel_mlp_skips[index]->as<SoftGating>()->weight,
                      /*gelu_input=*/!first, /*gelu_mid=*/!last);
  }
  const auto a = first ? x : torch::gelu(x);
  const auto s = conv.forward(a, /*add_bias=*/true);
  // y1 = SpectralConv(a) + W_skip a: the skip's GEMM adds the spectral output
  // in its epilogue. z = ChannelMLP(GELU(y1)) + g * a; the GELU (not on the
  // last block) runs inside the MLP's first layer, which stores only y1.
  const auto y1 = pointwise_linear(a, skip_w, torch::Tensor(), false, s);
  // Without channel MLPs z = GELU(y1) unless last; the next block's GELU of z
  // is neuraloperator's second one (single_gelu: z = y1, the paper's one).
  if (mlp == nullptr) return last || options.single_gelu() ? y1 : torch::gelu(y1);
  const auto& gate = channel_mlp_skips[index]->as<SoftGating>()->weight;
  return torch::addcmul(mlp->forward(y1, /*gelu_input=*/!last), gate.to(a.scalar_type()), a);
}

// ---------------------------------------------------------------------------
// FNO
// ---------------------------------------------------------------------------
FNOImpl::FNOImpl(const FNOOptions& options_) : options(options_) { reset(); }

int64_t FNOImpl::lifting_channels() const {
  return static_cast<int64_t>(options.lifting_channel_ratio() *
                              static_cast<double>(options.hidden_channels()));
}

int64_t FNOImpl::projection_channels() const {
  return static_cast<int64_t>(options.projection_channel_ratio() *
                              static_cast<double>(options.hidden_channels()));
}

void FNOImpl::reset() {
  const auto n = n_dim();
  TORCH_CHECK(n >= 1 && n <= 3, "FNO: n_modes must have 1, 2 or 3 entries, got ", n);
  for (auto m : options.n_modes()) TORCH_CHECK(m > 0, "FNO: n_modes entries must be > 0, got ", m);
  TORCH_CHECK(options.in_channels() > 0, "FNO: in_channels must be > 0, got ",
              options.in_channels());
  TORCH_CHECK(options.out_channels() > 0, "FNO: out_channels must be > 0, got ",
              options.out_channels());
  TORCH_CHECK(options.hidden_channels() > 0, "FNO: hidden_channels must be > 0, got ",
              options.hidden_channels());
  TORCH_CHECK(options.lifting_channel_ratio() >= 0, "FNO: lifting_channel_ratio must be >= 0, got ",
              options.lifting_channel_ratio());
  TORCH_CHECK(projection_channels() > 0, "FNO: projection_channel_ratio * hidden_channels must be ",
              ">= 1, got ratio ", options.projection_channel_ratio());
  const auto& pad = options.domain_padding();
  TORCH_CHECK(pad.empty() || pad.size() == 1 || static_cast<int64_t>(pad.size()) == n,
              "FNO: domain_padding needs 0, 1 or ", n, " entries, got ", pad.size());
  for (double p : pad) TORCH_CHECK(p >= 0, "FNO: domain_padding must be >= 0, got ", p);

  if (options.positional_embedding()) {
    positional_embedding = register_module("positional_embedding", GridEmbedding(n));
  }
  fno_blocks = register_module(
      "fno_blocks", FNOBlocks(FNOBlocksOptions(options.hidden_channels(), options.n_modes())
                                  .n_layers(options.n_layers())
                                  .channel_mlp_expansion(options.channel_mlp_expansion())
                                  .use_channel_mlp(options.use_channel_mlp())
                                  .spectral_init(options.spectral_init())
                                  .single_gelu(options.single_gelu())));
  const int64_t lift_in = options.in_channels() + (options.positional_embedding() ? n : 0);
  if (lifting_channels() > 0) {
    lifting = register_module(
        "lifting",
        ChannelMLP(ChannelMLPOptions(lift_in, options.hidden_channels(), lifting_channels())));
  } else {
    lifting = register_module(
        "lifting",
        ChannelMLP(ChannelMLPOptions(lift_in, options.hidden_channels(), options.hidden_channels())
                       .n_layers(1)));
  }
  projection = register_module(
      "projection", ChannelMLP(ChannelMLPOptions(options.hidden_channels(), options.out_channels(),
                                                 projection_channels())));
}

void FNOImpl::pretty_print(std::ostream& stream) const {
  stream << "fno::FNO(n_modes=" << torch::IntArrayRef(options.n_modes())
         << ", in=" << options.in_channels() << ", out=" << options.out_channels()
         << ", hidden=" << options.hidden_channels() << ", n_layers=" << options.n_layers()
         << ", lifting=" << lifting_channels() << ", projection=" << projection_channels()
         << (options.use_channel_mlp() ? "" : ", use_channel_mlp=false")
         << (options.single_gelu() ? ", single_gelu" : "") << ")";
}

std::vector<int64_t> FNOImpl::padding_for(torch::IntArrayRef spatial) const {
  const auto& frac = options.domain_padding();
  std::vector<int64_t> pads;
  if (frac.empty()) return pads;
  bool any = false;
  for (size_t i = 0; i < spatial.size(); ++i) {
    const double f = frac.size() == 1 ? frac[0] : frac[i];
    pads.push_back(round_half_even(f * static_cast<double>(spatial[i])));
    any = any || pads.back() > 0;
  }
  if (!any) pads.clear();
  return pads;
}

torch::Tensor FNOImpl::forward_lift(torch::Tensor x) {
  TORCH_CHECK(x.dim() == n_dim() + 2, "FNO: expected a ", n_dim() + 2, "-d input [B, C, *S] for a ",
              n_dim(), "-d FNO, got shape ", x.sizes());
  TORCH_CHECK(x.size(1) == options.in_channels(), "FNO: expected ", options.in_channels(),
              " input channels, got ", x.size(1));
  TORCH_CHECK(options.compute_dtype() == torch::kFloat ||
                  options.compute_dtype() == torch::kBFloat16 ||
                  options.compute_dtype() == torch::kHalf,
              "FNO: compute_dtype must be float, bfloat16 or half, got ", options.compute_dtype());
  if (current_band() != nullptr) {
    // A band of rows (fno/band.h): its spectra add up over the first dim's rows.
    TORCH_CHECK(n_dim() >= 2, "FNO: a band of rows needs a 2D or 3D model, got ", n_dim(),
                "-d n_modes");
    for (double p : options.domain_padding()) {
      TORCH_CHECK(p <= 0, "FNO: a band of rows does not support domain padding, got ", p);
    }
  }
  if (options.compute_dtype() != torch::kFloat && x.scalar_type() != options.compute_dtype()) {
    x = x.to(options.compute_dtype());
  }
  if (positional_embedding) x = positional_embedding->forward(x);
  x = lifting->forward(x);
  const auto pads = padding_for(x.sizes().slice(2));
  if (!pads.empty()) {
    // constant_pad_nd takes (before, after) pairs from the last dim backwards.
    std::vector<int64_t> pairs;
    const bool both = options.domain_padding_mode() == PaddingMode::kSymmetric;
    for (auto it = pads.rbegin(); it != pads.rend(); ++it) {
      pairs.push_back(both ? *it : 0);
      pairs.push_back(*it);
    }
    x = torch::constant_pad_nd(x, pairs, 0.0);
  }
  return x;
}

torch::Tensor FNOImpl::forward_block(const torch::Tensor& x, int64_t index) {
  return fno_blocks->forward(x, index);
}

torch::Tensor FNOImpl::forward_project(torch::Tensor x, torch::IntArrayRef spatial) {
  TORCH_CHECK(static_cast<int64_t>(spatial.size()) == n_dim(), "FNO: forward_project needs ",
              n_dim(), " spatial sizes, got ", spatial.size());
  const auto pads = padding_for(spatial);
  const bool both = options.domain_padding_mode() == PaddingMode::kSymmetric;
  for (size_t i = 0; i < pads.size(); ++i) {
    if (pads[i] > 0) x = x.narrow(static_cast<int64_t>(i) + 2, both ? pads[i] : 0, spatial[i]);
  }
  auto y = projection->forward(x);
  // Losses and their reductions run in the parameters' type.
  const auto param_type = projection->fcs[0]->as<PointwiseLinear>()->weight.scalar_type();
  return y.scalar_type() == param_type ? y : y.to(param_type);
}

torch::Tensor FNOImpl::forward(torch::Tensor x) {
  // x: [B, Cin, *S] -> [B, hidden, *S'] -> blocks -> [B, Cout, *S]
  const auto spatial = x.sizes().slice(2).vec();
  x = forward_lift(std::move(x));
  // Blocks pass pre-activations; the last block's output has none after it.
  for (int64_t i = 0; i < options.n_layers(); ++i) x = forward_block(x, i);
  return forward_project(std::move(x), spatial);
}

int64_t count_params(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& p : module.parameters()) {
    total += p.numel() * (p.is_complex() ? 2 : 1);
  }
  return total;
}

}  // namespace fno
