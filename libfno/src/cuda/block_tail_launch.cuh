// What the block-tail launchers share: the map from the run-time dtype,
// Fp32Math and shape to a compiled launcher, and the alignment test for
// vector copies.
#pragma once

#include "block_tail.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace fno::cuda::detail {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Op<T, C, CM>::run(args...) for the run-time dtype and shape: only
// kCompiledChannels and kCompiledMid (block_tail.h) are instantiated.
template <template <typename, int, int> class Op, typename T, typename... Args>
int by_shape(int64_t channels, int64_t mid, Args&&... args) {
  if (block_tail_supported(channels, mid))
    return Op<T, kCompiledChannels, kCompiledMid>::run(std::forward<Args>(args)...);
  return cudaErrorInvalidValue;
}

// fp32 activations run the tensor-core kernels in TF32 where the caller allows
// it, else in 3xTF32 (fp32-level error) or (Fp32Math::kFfma) on the FFMA
// forward; bf16 and half always run the tensor-core kernels.
template <template <typename, int, int> class Op, template <typename, int, int> class OpTc,
          template <typename, int, int> class OpTc3, typename... Args>
int dispatch(Dtype dtype, Fp32Math fp32, int64_t channels, int64_t mid, Args&&... args) {
  switch (dtype) {
    case Dtype::kFloat:
      switch (fp32) {
        case Fp32Math::kTf32:
          return by_shape<OpTc, float>(channels, mid, std::forward<Args>(args)...);
        case Fp32Math::k3xTf32:
          return by_shape<OpTc3, float>(channels, mid, std::forward<Args>(args)...);
        case Fp32Math::kFfma:
          return by_shape<Op, float>(channels, mid, std::forward<Args>(args)...);
      }
      return cudaErrorInvalidValue;
    case Dtype::kBFloat16:
      return by_shape<OpTc, __nv_bfloat16>(channels, mid, std::forward<Args>(args)...);
    case Dtype::kHalf:
      return by_shape<OpTc, __half>(channels, mid, std::forward<Args>(args)...);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fno::cuda::detail
