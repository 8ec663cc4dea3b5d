// The GELU fork's backward kernel (cuda/gelu_backward_sum.h) on torch tensors;
// internal to libfno, called from GeluForkFn in pointwise_autograd.cpp.
#pragma once

#include <torch/types.h>

namespace fno::detail {

/// Whether the CUDA kernel runs: the fused kernels on, x, g1 and g2 CUDA
/// tensors of one device, dtype (fp32, bf16 or half) and shape.
bool fused_gelu_backward_sum_usable(const torch::Tensor& x, const torch::Tensor& g1,
                                    const torch::Tensor& g2);

/// GELU'(x) * (g1 + g2), as at::gelu_backward(g1 + g2, x) computes it.
// x, g1, g2: [*] -> [*] (contiguous)
torch::Tensor fused_gelu_backward_sum(const torch::Tensor& x, const torch::Tensor& g1,
                                      const torch::Tensor& g2);

}  // namespace fno::detail
