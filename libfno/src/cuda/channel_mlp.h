// Fused CUDA kernels for a two-layer channel MLP, y = W2 GELU(W1 act(x) + b1)
// + b2 at every grid point (act = GELU when gelu_input): the FNO's lifting and
// projection (internal to libfno; fno::channel_mlp2 in pointwise_autograd.cpp calls them
// through channel_mlp_fused.cpp). Torch-free, as block_tail.h.
//
// The LibTorch path makes the hidden layer [B, Cmid, N] (Cmid = 2x the FNO's
// width) in three passes over memory (a bias copy, the GEMM, the GELU) and
// reads it back for the second GEMM. These kernels keep it in registers:
// forward reads x and writes y; the backward reads x and dy once, writes dx
// and sums the weight gradients per CTA (hidden layers up to 64 wide, or 128
// where the sums fit; wider ones write the two tensors the weight-gradient
// GEMMs need, GELU(h) and dh, in one pass).
//
// Files: channel_mlp_forward.cu, channel_mlp_backward.cu; GELU from gelu.cuh,
// rounding from common.cuh.
//
// Layout: x [B, Cin, N] with channel c of grid point (b, n) at
// b * x_batch_stride + c * x_channel_stride + n (a slice of a wider [B, C, N']
// tensor: x_channel_stride = N', 64-bit offsets); outputs contiguous [B, C, N].
// Precision: activations in `dtype`, weights and biases given in fp32 and
// rounded to `dtype` (as the LibTorch path casts them), fp32 accumulation, and
// every value the LibTorch path stores (h, GELU(h), y; W2^T dy, dh) rounded to
// `dtype` where it would be: the same numbers up to summation order.
#pragma once

#include "block_tail.h"

#include <cstdint>

namespace fno::cuda {

/// Whether the kernels are compiled for Cin inputs and Cout outputs (any
/// hidden width Cmid up to kMaxChannelMlpMid): the 2D and 3D liftings of a
/// one-channel input with its grid coordinates into width 32, and the
/// projection from width 32 to one channel (the seed model's); the channel
/// MLP of a width-20 FNO block (20 -> Cmid -> 20, which has no fused block
/// tail) and the projection from width 20 (the Navier-Stokes models').
bool channel_mlp_supported(int64_t in, int64_t mid, int64_t out);
constexpr int64_t kMaxChannelMlpMid = 256;  // the weights fit 48 KiB of shared memory

/// The (Cin, Cout) pairs compiled (channel_mlp.cuh's by_shape instantiates them).
struct ChannelMlpShape {
  int in, out;
};
constexpr ChannelMlpShape kCompiledChannelMlps[] = {{3, 32}, {4, 32}, {32, 1}, {20, 20}, {20, 1}};

/// fp32 device pointers: w1 [Cmid, Cin], b1 [Cmid] or null, w2 [Cout, Cmid],
/// b2 [Cout] or null, contiguous.
struct ChannelMlpWeights {
  const float* w1;
  const float* b1;
  const float* w2;
  const float* b2;
};

/// A [B, C, N] operand (or a slice of a wider one): its data and strides.
struct ChannelMlpInput {
  const void* data;
  int64_t batch_stride;
  int64_t channel_stride;
};

/// y = W2 GELU(W1 act(x) + b1) + b2: x [B, Cin, N] -> y [B, Cout, N] contiguous.
/// Returns a cudaError_t (0 on success).
int channel_mlp_forward(Dtype dtype, ChannelMlpInput x, void* y, int64_t batch, int64_t in,
                        int64_t mid, int64_t out, int64_t n, const ChannelMlpWeights& w,
                        bool gelu_input, void* stream);

/// The backward's per-point part: with h = W1 act(x) + b1 recomputed, writes
/// g = GELU(h) and dh = GELU'(h) * (W2^T dy), both [B, Cmid, N] contiguous in
/// `dtype` (the weight gradients are GEMMs over them: dW2 = dy g^T, dW1 = dh
/// act(x)^T). x [B, Cin, N], dy [B, Cout, N]. Returns a cudaError_t.
int channel_mlp_hidden_grad(Dtype dtype, ChannelMlpInput x, ChannelMlpInput dy, void* g, void* dh,
                            int64_t batch, int64_t in, int64_t mid, int64_t out, int64_t n,
                            const ChannelMlpWeights& w, bool gelu_input, void* stream);

/// Whether channel_mlp_backward runs this shape: a compiled (Cin, Cout) pair
/// and a hidden layer of at most 64 units, or of at most
/// kMaxChannelMlpBackwardMid where the CTA's partial weight-gradient sums fit
/// its tiles' shared memory (the liftings and the projections; not 20 -> 20),
/// (wider ones take channel_mlp_hidden_grad and GEMMs).
bool channel_mlp_backward_supported(int64_t in, int64_t mid, int64_t out);
constexpr int64_t kMaxChannelMlpBackwardMid = 128;

/// fp32 device pointers for the weight gradients, overwritten: w1 [Cmid, Cin],
/// b1 [Cmid] or null (not computed), w2 [Cout, Cmid], b2 [Cout] or null.
struct ChannelMlpGrads {
  float* w1;
  float* b1;
  float* w2;
  float* b2;
};

/// The floats of channel_mlp_backward's workspace for these sizes (the
/// per-CTA partial sums of the weight gradients).
int64_t channel_mlp_backward_workspace(int64_t batch, int64_t in, int64_t mid, int64_t out,
                                       int64_t n);

/// The whole backward in two kernels: one pass over x and dy recomputes h,
/// writes dx = act'(x) * W1^T dh (when dx is not null; [B, Cin, N] contiguous
/// in `dtype`) and sums the weight gradients per CTA into `workspace` (fp32,
/// channel_mlp_backward_workspace floats); a second sums the CTAs' partials in
/// a fixed order into g (deterministic). The sums are hierarchical at any
/// grid: fp32 over at most 16 points, fp64 over a CTA's tiles and over the
/// CTAs (docs/parity.md). dh = GELU'(h) * (W2^T dy) and GELU(h)
/// are rounded to `dtype` as channel_mlp_hidden_grad stores them. x [B, Cin,
/// N], dy [B, Cout, N]. Returns a cudaError_t.
int channel_mlp_backward(Dtype dtype, ChannelMlpInput x, ChannelMlpInput dy, void* dx,
                         int64_t batch, int64_t in, int64_t mid, int64_t out, int64_t n,
                         const ChannelMlpWeights& w, bool gelu_input, float* workspace,
                         const ChannelMlpGrads& g, void* stream);

}  // namespace fno::cuda
