// The expanding real-DFT GEMM (cuda/dft_expand.h) on torch tensors; internal
// to libfno, called by spectral.cpp's last-dim transforms.
#pragma once

#include <torch/types.h>

namespace fno::detail {

/// Whether the CUDA kernel computes t @ mat for fp32 tensors t [..., N2] on
/// mat's device: the fused kernels on (and FNO_DFT_EXPAND not 0), mat [N2, S]
/// fp32 on CUDA, contiguous, with a compiled N2 and S.
bool dft_expand_usable(const torch::Tensor& mat);
/// The same for x itself: x fp32 [..., N2] on mat's device.
bool dft_expand_usable(const torch::Tensor& x, const torch::Tensor& mat);

/// x @ mat by the kernel. x: [..., N2], mat: [N2, S] -> [..., S]
torch::Tensor dft_expand(const torch::Tensor& x, const torch::Tensor& mat);

}  // namespace fno::detail
