// What the torch-side wrappers of the fused CUDA kernels share
// (block_tail_fused.cpp, channel_mlp_fused.cpp); only with FNO_CUDA_KERNELS.
#pragma once

#include <torch/types.h>

#include "cuda/block_tail.h"

namespace fno::detail {

/// The kernels' name for a tensor's dtype (fp32 for anything but bf16 / half).
inline cuda::Dtype kernel_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kBFloat16:
      return cuda::Dtype::kBFloat16;
    case torch::kHalf:
      return cuda::Dtype::kHalf;
    default:
      return cuda::Dtype::kFloat;
  }
}

/// The fp32, contiguous copy the kernels read (a no-op under the precision
/// contract: parameters are fp32 masters).
inline torch::Tensor f32(const torch::Tensor& t) { return t.to(torch::kFloat).contiguous(); }

}  // namespace fno::detail
