// The fused CUDA channel MLP (the kernels behind cuda/channel_mlp.h) on torch
// tensors; internal to libfno, called from ChannelMLP2Fn in pointwise_autograd.cpp.
#pragma once

#include <fno/layers.h>

#include <torch/types.h>

#include <utility>

namespace fno::detail {

/// Whether the fused kernels run the two-layer channel MLP on x [B, Cin, N]
/// (unit stride along N; any batch and channel strides) with w1 [Cmid, Cin],
/// b1 [Cmid], w2 [Cout, Cmid], b2 [Cout] (biases may be undefined): a CUDA
/// tensor of fp32, bf16 or half, the fused kernels on, and a compiled shape.
/// A shape without a kernel is said once per process on stderr, unless
/// !say_missing (a caller that says so itself: a block tail's channel MLP).
bool fused_channel_mlp_usable(const torch::Tensor& x, const torch::Tensor& w1,
                              const torch::Tensor& b1, const torch::Tensor& w2,
                              const torch::Tensor& b2, bool say_missing = true);

/// y = W2 GELU(W1 act(x) + b1) + b2 (act = GELU when gelu_input).
// x: [B, Cin, N] -> [B, Cout, N] in x's dtype
torch::Tensor fused_channel_mlp_forward(const torch::Tensor& x, const torch::Tensor& w1,
                                        const torch::Tensor& b1, const torch::Tensor& w2,
                                        const torch::Tensor& b2, bool gelu_input);

/// {GELU(h), GELU'(h) * W2^T dy} with h = W1 act(x) + b1 recomputed; x and dy
/// may be slices (unit stride along N).
// x: [B, Cin, N], dy: [B, Cout, N] -> g, dh: [B, Cmid, N] in x's dtype
std::pair<torch::Tensor, torch::Tensor> fused_channel_mlp_hidden_grad(
    const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& w1,
    const torch::Tensor& b1, const torch::Tensor& w2, bool gelu_input);

/// Whether fused_channel_mlp_backward runs this MLP (fused_channel_mlp_usable
/// with a hidden layer of at most 64 units, or 128 where
/// cuda::channel_mlp_backward_supported says so, and dy of x's dtype).
bool fused_channel_mlp_backward_usable(const torch::Tensor& x, const torch::Tensor& dy,
                                       const torch::Tensor& w1, const torch::Tensor& b1,
                                       const torch::Tensor& w2, const torch::Tensor& b2,
                                       bool say_missing = true);

/// The MLP's gradients, dx (when need_dx) in x's dtype and the weights' in
/// theirs (fp32 for the masters), from one pass over x and dy; the hidden layer is never stored,
/// and the weight gradients are summed in a fixed order (deterministic). A bias's gradient is
/// undefined where the bias is.
// x: [B, Cin, N], dy: [B, Cout, N] -> dx: [B, Cin, N]; w1 [Cmid, Cin], b1
// [Cmid], w2 [Cout, Cmid], b2 [Cout]
ChannelMLP2Grads fused_channel_mlp_backward(const torch::Tensor& x, const torch::Tensor& dy,
                                            const torch::Tensor& w1, const torch::Tensor& b1,
                                            const torch::Tensor& w2, const torch::Tensor& b2,
                                            bool gelu_input, bool need_dx);

}  // namespace fno::detail
