// Building blocks of the FNO, in the style of the PyTorch C++ frontend.
//
// Every module's parameter names equal neuraloperator 2.0.0's, so that a
// state_dict moves between the two without renaming (see fno/serialize.h).
#pragma once

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <cstdint>
#include <vector>

namespace fno {

/// Python's round(): halves go to the even neighbour (round(2.5) == 2).
int64_t round_half_even(double x);

// ---------------------------------------------------------------------------
// Activation memory. By default every layer stores what its backward reads.
// While a RecomputeCheapGuard is alive on a thread, layers built on this
// thread's forward store only the activations that are expensive to make again
// (a block's input and its spectral+skip output, an MLP's input) and recompute
// the cheap ones in backward (GELUs, MLP hidden layers: one pointwise GEMM and
// a few elementwise passes). In an FNO block that is 2 stored tensors instead
// of 3.5, and an MLP stores its input only, whatever its hidden width.
// ---------------------------------------------------------------------------
class RecomputeCheapGuard {
 public:
  RecomputeCheapGuard();
  ~RecomputeCheapGuard();
  RecomputeCheapGuard(const RecomputeCheapGuard&) = delete;
  RecomputeCheapGuard& operator=(const RecomputeCheapGuard&) = delete;

 private:
  bool previous_;
};
/// Whether a RecomputeCheapGuard is alive on this thread.
bool recompute_cheap();

/// y = W2 GELU(W1 act(x) + b1) + b2 over the channel dim, act = GELU when
/// `gelu_input`, storing only x: backward recomputes the hidden layer (per
/// batch entry on long grids, so its transient is one entry's).
/// x: [B, Cin, *S], w1: [Cmid, Cin, 1], b1: [Cmid], w2: [Cout, Cmid, 1], b2: [Cout]
/// (biases may be undefined) -> [B, Cout, *S]
torch::Tensor channel_mlp2(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                           const torch::Tensor& w2, const torch::Tensor& b2, bool gelu_input);

/// The gradients of channel_mlp2 at dy, the gradient of its output, without
/// running its forward: the hidden layer is remade from x, as its backward does.
/// dx only when `need_dx`; the weights' in their own shapes (fp32, as the
/// parameters), undefined for an undefined bias. Records no autograd history.
/// x: [B, Cin, *S], dy: [B, Cout, *S] in x's dtype -> dx: [B, Cin, *S]
struct ChannelMLP2Grads {
  torch::Tensor dx, w1, b1, w2, b2;
};
ChannelMLP2Grads channel_mlp2_backward(const torch::Tensor& x, const torch::Tensor& dy,
                                       const torch::Tensor& w1, const torch::Tensor& b1,
                                       const torch::Tensor& w2, const torch::Tensor& b2,
                                       bool gelu_input, bool need_dx);

/// GELU(x) for two readers (a block's spectral conv and its tail), as two
/// tensors of one storage; x is stored. Backward: GELU'(x) (g1 + g2) in one
/// pass on CUDA where autograd would add the two gradients, then run
/// GeluBackward (six passes over memory), with the same numbers.
/// x: [*] -> (GELU(x), GELU(x)): [*]
std::array<torch::Tensor, 2> gelu_fork(const torch::Tensor& x);

/// The pointwise part of an FNO block, storing only its input and y1:
///   a  = GELU(x) when `gelu_input`, else x       (a is given: the spectral conv read it)
///   y1 = W_skip a + s                              (s: the spectral conv's output)
///   z  = W2 GELU(W1 act(y1) + b1) + b2 + gate * a  (act = GELU when `gelu_mid`)
/// x, a, s: [B, C, *S]; w_skip: [C, C, 1]; w1: [Cmid, C, 1]; w2: [C, Cmid, 1];
/// gate: [1, C, 1...] -> z: [B, C, *S]
torch::Tensor block_tail(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& s,
                         const torch::Tensor& w_skip, const torch::Tensor& w1,
                         const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                         const torch::Tensor& gate, bool gelu_input, bool gelu_mid);

/// y = W act(x) + b + r over the channel dim, act = GELU when `gelu_input` (then
/// only x is stored for backward and GELU(x) is recomputed there); the
/// residual r, when defined, is added by the GEMM itself (no extra pass).
/// x: [B, Cin, *S], weight: [Cout, Cin, 1], bias: [Cout] (any shape of Cout
/// elements) or undefined, residual: [B, Cout, *S] or undefined -> [B, Cout, *S]
torch::Tensor pointwise_linear(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool gelu_input = false,
                               const torch::Tensor& residual = {});

// ---------------------------------------------------------------------------
// PointwiseLinear: a 1x1 convolution over the channel dimension, computed as a
// GEMM. Parameters are stored as neuraloperator's nn.Conv1d(kernel_size=1):
// weight [out, in, 1] and bias [out].
// ---------------------------------------------------------------------------
struct PointwiseLinearOptions {
  PointwiseLinearOptions(int64_t in_channels, int64_t out_channels)
      : in_channels_(in_channels), out_channels_(out_channels) {}
  /// Channels of the input.
  TORCH_ARG(int64_t, in_channels);
  /// Channels of the output.
  TORCH_ARG(int64_t, out_channels);
  /// Whether to add a learned bias.
  TORCH_ARG(bool, bias) = true;
};

class PointwiseLinearImpl : public torch::nn::Cloneable<PointwiseLinearImpl> {
 public:
  explicit PointwiseLinearImpl(const PointwiseLinearOptions& options);
  PointwiseLinearImpl(int64_t in_channels, int64_t out_channels)
      : PointwiseLinearImpl(PointwiseLinearOptions(in_channels, out_channels)) {}
  void reset() override;
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;
  // x: [B, Cin, *S] -> [B, Cout, *S]
  torch::Tensor forward(const torch::Tensor& x);
  // x: [B, Cin, *S] -> W GELU(x) + b: [B, Cout, *S], storing only x for backward.
  torch::Tensor forward(const torch::Tensor& x, bool gelu_input);

  PointwiseLinearOptions options;
  torch::Tensor weight;  // [Cout, Cin, 1]
  torch::Tensor bias;    // [Cout] or undefined
};
TORCH_MODULE(PointwiseLinear);

// ---------------------------------------------------------------------------
// ChannelMLP: n_layers pointwise linear layers with GELU between them.
// State-dict names: fcs.{i}.weight, fcs.{i}.bias.
// ---------------------------------------------------------------------------
struct ChannelMLPOptions {
  ChannelMLPOptions(int64_t in_channels, int64_t out_channels, int64_t hidden_channels)
      : in_channels_(in_channels), out_channels_(out_channels), hidden_channels_(hidden_channels) {}
  /// Channels of the input.
  TORCH_ARG(int64_t, in_channels);
  /// Channels of the output.
  TORCH_ARG(int64_t, out_channels);
  /// Channels of the hidden layers.
  TORCH_ARG(int64_t, hidden_channels);
  /// Number of linear layers (>= 1).
  TORCH_ARG(int64_t, n_layers) = 2;
};

class ChannelMLPImpl : public torch::nn::Cloneable<ChannelMLPImpl> {
 public:
  explicit ChannelMLPImpl(const ChannelMLPOptions& options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  // x: [B, Cin, *S] -> [B, Cout, *S]
  torch::Tensor forward(torch::Tensor x);
  // x: [B, Cin, *S] -> ChannelMLP(GELU(x)): [B, Cout, *S]
  torch::Tensor forward(torch::Tensor x, bool gelu_input);

  ChannelMLPOptions options;
  torch::nn::ModuleList fcs{nullptr};
};
TORCH_MODULE(ChannelMLP);

// ---------------------------------------------------------------------------
// SoftGating: a learned per-channel scale, initialised to 1, no bias.
// State-dict name: weight [1, C, 1, ...].
// ---------------------------------------------------------------------------
class SoftGatingImpl : public torch::nn::Cloneable<SoftGatingImpl> {
 public:
  SoftGatingImpl(int64_t channels, int64_t n_dim);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  // x: [B, C, *S] -> [B, C, *S]
  torch::Tensor forward(const torch::Tensor& x);

  int64_t channels;
  int64_t n_dim;
  torch::Tensor weight;  // [1, C, 1...]
};
TORCH_MODULE(SoftGating);

// ---------------------------------------------------------------------------
// LinearSkip: neuraloperator's Flattened1dConv skip (a 1x1 conv, no bias).
// State-dict name: conv.weight [Cout, Cin, 1].
// ---------------------------------------------------------------------------
class LinearSkipImpl : public torch::nn::Cloneable<LinearSkipImpl> {
 public:
  LinearSkipImpl(int64_t in_channels, int64_t out_channels);
  void reset() override;
  // x: [B, Cin, *S] -> [B, Cout, *S]
  torch::Tensor forward(const torch::Tensor& x);

  int64_t in_channels;
  int64_t out_channels;
  PointwiseLinear conv{nullptr};
};
TORCH_MODULE(LinearSkip);

// ---------------------------------------------------------------------------
// SpectralConv: Fourier-space channel mixing over the lowest modes.
//
//   y = irfftn( W . rfftn(x)[kept modes] ) + bias,  FFTs with norm="forward".
//
// Kept frequencies: -m/2 .. m/2-1 on every dim but the last, 0 .. m_last//2 on
// the last (the real FFT's half spectrum). The spectrum's corners are read and
// written directly, with no fftshift copies; the result equals
// neuraloperator's fftshift formulation with the inverse shift done right
// (ifftshift), which 2.0.0 gets wrong for odd grid sizes.
//
// When the grid holds fewer modes than the weights, a centred sub-slice of the
// weights is used, with neuraloperator's index arithmetic.
//
// State-dict names: weight.tensor [Cin, Cout, m1, ..., m_last//2+1] complex64
// (tltorch's DenseTensor), bias [Cout, 1, ...].
// ---------------------------------------------------------------------------
/// How a SpectralConv's weights start: neuraloperator's (a complex normal of
/// std sqrt(2 / (in + out)); the bias normal of that std), or the FNO paper's
/// scripts' (real and imaginary parts uniform on [0, 1 / (in * out)), the
/// bias, their 1x1 convolution's, uniform on +-1 / sqrt(in)).
enum class SpectralInit { kNeuralOperator, kPaper };

struct SpectralConvOptions {
  SpectralConvOptions(int64_t in_channels, int64_t out_channels, std::vector<int64_t> n_modes)
      : in_channels_(in_channels), out_channels_(out_channels), n_modes_(std::move(n_modes)) {}
  /// Channels of the input.
  TORCH_ARG(int64_t, in_channels);
  /// Channels of the output.
  TORCH_ARG(int64_t, out_channels);
  /// Modes kept per spatial dim, as given to neuraloperator (the last is halved + 1 internally).
  TORCH_ARG(std::vector<int64_t>, n_modes);
  /// Whether to add a learned real bias.
  TORCH_ARG(bool, bias) = true;
  /// How the weights and the bias start.
  TORCH_ARG(SpectralInit, init) = SpectralInit::kNeuralOperator;
};

/// Holds tltorch's DenseTensor parameter, named "tensor", for state-dict parity.
class DenseTensorImpl : public torch::nn::Cloneable<DenseTensorImpl> {
 public:
  explicit DenseTensorImpl(std::vector<int64_t> shape);
  void reset() override;
  std::vector<int64_t> shape;
  torch::Tensor tensor;  // complex64
};
TORCH_MODULE(DenseTensor);

class SpectralConvImpl : public torch::nn::Cloneable<SpectralConvImpl> {
 public:
  explicit SpectralConvImpl(const SpectralConvOptions& options);
  void reset() override;
  void pretty_print(std::ostream& stream) const override;
  // x: [B, Cin, *S] -> [B, Cout, *S]
  torch::Tensor forward(const torch::Tensor& x);
  // Same; without the bias when !add_bias (a caller that adds it elsewhere).
  // The bias is added to the zero-frequency mode before the inverse transform,
  // which adds it at every grid point at no cost.
  torch::Tensor forward(const torch::Tensor& x, bool add_bias);

  /// Shape of the complex weight: [Cin, Cout, m1, ..., m_last//2+1].
  std::vector<int64_t> weight_shape() const;

  SpectralConvOptions options;
  DenseTensor weight{nullptr};
  torch::Tensor bias;  // [Cout, 1...] or undefined
};
TORCH_MODULE(SpectralConv);

// ---------------------------------------------------------------------------
// GridEmbedding: appends d coordinate channels linspace(0,1,res+1)[:-1].
// ---------------------------------------------------------------------------
class GridEmbeddingImpl : public torch::nn::Cloneable<GridEmbeddingImpl> {
 public:
  explicit GridEmbeddingImpl(int64_t n_dim);
  void reset() override {}
  // x: [B, C, *S] -> [B, C + d, *S]
  torch::Tensor forward(const torch::Tensor& x);

  int64_t n_dim;

 private:
  // The coordinate channels [1, d, *S] of every grid, device and dtype seen,
  // kept, so that a forward makes no host-to-device copy (which would
  // synchronize the stream) and a grid a captured CUDA graph reads is never
  // freed when another grid is used (training at 16^2, evaluating at 32^2).
  std::vector<torch::Tensor> grids_;
};
TORCH_MODULE(GridEmbedding);

}  // namespace fno
