// The expanding real-DFT GEMM (cuda/dft_expand.h) on torch tensors; internal
// to libfno, called by spectral.cpp's last-dim transforms.
#pragma once

#include <torch/types.h>

namespace fno::detail {

/// Whether the CUDA kernel computes x @ mat: the fused kernels on (and
/// FNO_DFT_EXPAND not 0), x and mat fp32 on one CUDA device, mat [N2, S]
/// contiguous with a compiled N2 and S a multiple of 4, x [..., N2].
bool dft_expand_usable(const torch::Tensor& x, const torch::Tensor& mat);

/// x @ mat by the kernel. x: [..., N2], mat: [N2, S] -> [..., S]
torch::Tensor dft_expand(const torch::Tensor& x, const torch::Tensor& mat);

}  // namespace fno::detail
