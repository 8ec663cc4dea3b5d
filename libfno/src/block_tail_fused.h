// The fused CUDA block_tail (the kernels behind cuda/block_tail.h) on torch
// tensors; internal to libfno, called from BlockTailFn in pointwise_autograd.cpp.
#pragma once

#include <torch/types.h>

namespace fno::detail {

/// Whether the fused kernels run block_tail on these tensors: a, s [B, C, N]
/// contiguous CUDA tensors of one floating dtype; w_skip [C, C], w1 [Cmid, C],
/// b1 [Cmid], w2 [C, Cmid], b2 [C], gate [1, C, 1] on the same device.
bool fused_block_tail_usable(const torch::Tensor& a, const torch::Tensor& s,
                             const torch::Tensor& w_skip, const torch::Tensor& w1,
                             const torch::Tensor& b1, const torch::Tensor& w2,
                             const torch::Tensor& b2, const torch::Tensor& gate);

/// {z, y1}, both in a's dtype.
std::pair<torch::Tensor, torch::Tensor> fused_block_tail_forward(
    const torch::Tensor& a, const torch::Tensor& s, const torch::Tensor& w_skip,
    const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
    const torch::Tensor& b2, const torch::Tensor& gate, bool gelu_mid);

/// BlockTailFn's gradients: da, ds in the activations' dtype, then the weight,
/// bias and gate gradients (fp32, shaped and typed as the parameters given).
struct BlockTailGradients {
  torch::Tensor da, ds, w_skip, w1, b1, w2, b2, gate;
};
BlockTailGradients fused_block_tail_backward(const torch::Tensor& dz, const torch::Tensor& in,
                                             const torch::Tensor& y1, const torch::Tensor& w_skip,
                                             const torch::Tensor& w1, const torch::Tensor& b1,
                                             const torch::Tensor& w2, const torch::Tensor& b2,
                                             const torch::Tensor& gate, bool gelu_input,
                                             bool gelu_mid);

/// The tiled step's forward (cuda/block_tail.h block_tail_forward_next): the
/// next block's input GELU(z) where gelu_mid, else z, in a's dtype.
torch::Tensor fused_block_tail_next(const torch::Tensor& a, const torch::Tensor& s,
                                    const torch::Tensor& w_skip, const torch::Tensor& w1,
                                    const torch::Tensor& b1, const torch::Tensor& w2,
                                    const torch::Tensor& b2, const torch::Tensor& gate,
                                    bool gelu_mid);

/// The tiled step's backward (block_tail_backward_recompute): from g, the
/// gradient of fused_block_tail_next's output, and a, s; the gradients as
/// fused_block_tail_backward gives them.
BlockTailGradients fused_block_tail_backward_recompute(
    const torch::Tensor& g, const torch::Tensor& a, const torch::Tensor& s,
    const torch::Tensor& w_skip, const torch::Tensor& w1, const torch::Tensor& b1,
    const torch::Tensor& w2, const torch::Tensor& b2, const torch::Tensor& gate, bool gelu_mid);

}  // namespace fno::detail
