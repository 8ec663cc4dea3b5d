// The weight-gradient kernel of the LibTorch channel layers (cuda/channel_wgrad.h)
// on torch tensors; internal to libfno, called from add_wgrad in pointwise_autograd.cpp.
#pragma once

#include <torch/types.h>

namespace fno::detail {

/// Whether the CUDA kernel adds this gradient: the fused kernels on, gy
/// [B, Cout, N] and h [B, Cin, N] CUDA tensors of one dtype (fp32, bf16 or
/// half) with unit stride along N, gw [Cout, Cin] fp32 and contiguous on their
/// device, and Cout + Cin within the kernel's limit.
bool fused_channel_wgrad_usable(const torch::Tensor& gw, const torch::Tensor& gy,
                                const torch::Tensor& h);

/// gw += sum over b and n of gy[b, :, n] h[b, :, n]^T, in fp32, summed in a
/// fixed order (deterministic).
// gy: [B, Cout, N], h: [B, Cin, N] -> gw: [Cout, Cin] (in place)
void fused_channel_wgrad_add(torch::Tensor& gw, const torch::Tensor& gy, const torch::Tensor& h);

}  // namespace fno::detail
