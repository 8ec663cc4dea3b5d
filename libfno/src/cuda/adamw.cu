// AdamW's last step on the device (adamw.h).
#include "adamw.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace fno::cuda {
namespace {

constexpr int kThreads = 256;

// blockIdx.y: the tensor; a grid-stride loop over its elements.
__global__ void adamw_apply_kernel(AdamWApplyArgs args, const float* __restrict__ step,
                                   const float* __restrict__ decay) {
  const int t = blockIdx.y;
  float* __restrict__ p = args.p[t];
  const float* __restrict__ q = args.q[t];
  const int64_t n = args.n[t];
  const float s = *step;
  const float a = decay != nullptr ? *decay : 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float x = __fmaf_rn(s, q[i], p[i]);
    if (decay != nullptr) x = __fmaf_rn(a, x, x);
    p[i] = x;
  }
}

}  // namespace

int adamw_apply(const AdamWApplyArgs& args, const float* step, const float* decay, void* stream) {
  if (args.count <= 0) return 0;
  int64_t largest = 0;
  for (int i = 0; i < args.count; ++i) largest = std::max(largest, args.n[i]);
  const int64_t blocks = std::min<int64_t>((largest + kThreads - 1) / kThreads, 1024);
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(blocks, 1)),
                  static_cast<unsigned>(args.count));
  adamw_apply_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(args, step, decay);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace fno::cuda
