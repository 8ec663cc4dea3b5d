// The Fourier Neural Operator (Li et al., ICLR 2021), equal to
// neuraloperator 2.0.0's `FNO` with its default options, in 1D, 2D and 3D.
//
//   x -> grid embedding -> lifting MLP -> [pad] -> n_layers FNO blocks
//     -> [unpad] -> projection MLP
//
// FNO block i (post-activation), with x its input:
//   x1 = SpectralConv(x) + W_skip x ;  x1 = GELU(x1) unless last
//   x2 = ChannelMLP(x1) + g * x     ;  x2 = GELU(x2) unless last
// Without the channel MLP (use_channel_mlp false), x2 = GELU(x1) unless last:
// the FNO paper's block, with GELU applied twice as neuraloperator does
// (single_gelu: x2 = x1, so that the next block's GELU is the only one, as in
// the FNO paper's scripts).
#pragma once

#include <fno/layers.h>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fno {

/// Where domain padding goes: both ends of each dim (neuraloperator's
/// DomainPadding), or its end alone (the FNO paper's scripts, F.pad(x, [0, p])).
enum class PaddingMode { kSymmetric, kOneSided };

struct FNOOptions {
  FNOOptions(std::vector<int64_t> n_modes, int64_t in_channels, int64_t out_channels,
             int64_t hidden_channels)
      : n_modes_(std::move(n_modes)),
        in_channels_(in_channels),
        out_channels_(out_channels),
        hidden_channels_(hidden_channels) {}
  /// Fourier modes kept per spatial dim; its length (1, 2 or 3) is the dimension.
  TORCH_ARG(std::vector<int64_t>, n_modes);
  /// Channels of the input function.
  TORCH_ARG(int64_t, in_channels);
  /// Channels of the output function.
  TORCH_ARG(int64_t, out_channels);
  /// Width of the FNO blocks.
  TORCH_ARG(int64_t, hidden_channels);
  /// Number of FNO blocks.
  TORCH_ARG(int64_t, n_layers) = 4;
  /// Lifting MLP hidden width = int(ratio * hidden_channels); 0 gives one linear layer.
  TORCH_ARG(double, lifting_channel_ratio) = 2.0;
  /// Projection MLP hidden width = int(ratio * hidden_channels).
  TORCH_ARG(double, projection_channel_ratio) = 2.0;
  /// Append the d coordinate channels of the grid to the input.
  TORCH_ARG(bool, positional_embedding) = true;
  /// Each block has a ChannelMLP with a soft-gated skip (neuraloperator's
  /// default); false leaves them out, as neuraloperator's use_channel_mlp=False.
  TORCH_ARG(bool, use_channel_mlp) = true;
  /// Without channel MLPs only: one GELU between blocks, as the FNO paper's
  /// scripts, instead of neuraloperator's two. Not part of the state dict.
  TORCH_ARG(bool, single_gelu) = false;
  /// Block ChannelMLP hidden width = round(hidden_channels * expansion).
  TORCH_ARG(double, channel_mlp_expansion) = 0.5;
  /// How the blocks' spectral convolutions start (fno/layers.h): neuraloperator's,
  /// or the FNO paper's scripts'. Not part of the state dict.
  TORCH_ARG(SpectralInit, spectral_init) = SpectralInit::kNeuralOperator;
  /// Zero padding as a fraction of each spatial size: {} none, {p} all dims, or one per dim.
  TORCH_ARG(std::vector<double>, domain_padding) = {};
  /// kSymmetric: round(p * size) zeros before and after; kOneSided: after only.
  TORCH_ARG(PaddingMode, domain_padding_mode) = PaddingMode::kSymmetric;
  /// The type the layers compute and store activations in (fno/precision.h):
  /// kBFloat16 or kHalf cast the input to it and the output back to the
  /// parameters' type; the parameters themselves keep their type (fp32).
  /// kFloat: the parameters' type. Not part of the state dict.
  TORCH_ARG(c10::ScalarType, compute_dtype) = c10::ScalarType::Float;
};

/// The blocks' settings (FNOOptions' block fields; FNO fills them in).
struct FNOBlocksOptions {
  FNOBlocksOptions(int64_t channels, std::vector<int64_t> n_modes)
      : channels_(channels), n_modes_(std::move(n_modes)) {}
  /// Width of the blocks (FNOOptions::hidden_channels).
  TORCH_ARG(int64_t, channels);
  /// Fourier modes kept per spatial dim.
  TORCH_ARG(std::vector<int64_t>, n_modes);
  TORCH_ARG(int64_t, n_layers) = 4;
  TORCH_ARG(double, channel_mlp_expansion) = 0.5;
  TORCH_ARG(bool, use_channel_mlp) = true;
  TORCH_ARG(SpectralInit, spectral_init) = SpectralInit::kNeuralOperator;
  TORCH_ARG(bool, single_gelu) = false;
};

/// The n_layers blocks, as neuraloperator's FNOBlocks (state-dict prefix "fno_blocks.").
class FNOBlocksImpl : public torch::nn::Cloneable<FNOBlocksImpl> {
 public:
  explicit FNOBlocksImpl(FNOBlocksOptions options);
  void reset() override;
  // x: [B, C, *S] -> [B, C, *S], block `index` (0-based).
  torch::Tensor forward(const torch::Tensor& x, int64_t index);

  FNOBlocksOptions options;
  torch::nn::ModuleList convs{nullptr};              // SpectralConv
  torch::nn::ModuleList fno_skips{nullptr};          // LinearSkip
  torch::nn::ModuleList channel_mlp{nullptr};        // ChannelMLP (empty without them)
  torch::nn::ModuleList channel_mlp_skips{nullptr};  // SoftGating (empty without them)
};
TORCH_MODULE(FNOBlocks);

class FNOImpl : public torch::nn::Cloneable<FNOImpl> {
 public:
  explicit FNOImpl(const FNOOptions& options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;

  // x: [B, Cin, *S] -> [B, Cout, *S]
  torch::Tensor forward(torch::Tensor x);

  // The stages, for callers that schedule them one at a time (offload/).
  // x: [B, Cin, *S] -> [B, hidden, *S']  (cast to the compute type, embedding,
  // lifting, padding)
  torch::Tensor forward_lift(torch::Tensor x);
  // x: [B, hidden, *S'] -> [B, hidden, *S'], block `index`. Blocks pass
  // pre-activations: block i > 0 applies the GELU that ends block i-1 in
  // neuraloperator, so a block's output is its value before that GELU.
  torch::Tensor forward_block(const torch::Tensor& x, int64_t index);
  // x: [B, hidden, *S'] -> [B, Cout, *S]  (unpadding to `spatial`, projection,
  // cast to the parameters' type)
  torch::Tensor forward_project(torch::Tensor x, torch::IntArrayRef spatial);

  int64_t n_dim() const { return static_cast<int64_t>(options.n_modes().size()); }
  int64_t lifting_channels() const;
  int64_t projection_channels() const;
  /// Zero padding per spatial dim for an input of size `spatial` (each end's
  /// under kSymmetric, the end's under kOneSided); {} when none.
  std::vector<int64_t> padding_for(torch::IntArrayRef spatial) const;

  FNOOptions options;
  GridEmbedding positional_embedding{nullptr};
  FNOBlocks fno_blocks{nullptr};
  ChannelMLP lifting{nullptr};
  ChannelMLP projection{nullptr};
};
TORCH_MODULE(FNO);

/// Parameter count as neuraloperator's count_model_params: complex entries count twice.
int64_t count_params(const torch::nn::Module& module);

}  // namespace fno
