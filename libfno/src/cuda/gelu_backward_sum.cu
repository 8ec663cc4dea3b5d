// dx = GELU'(x) * (g1 + g2) (gelu_backward_sum.h): one thread per group of
// 16 bytes of each tensor (uint4 loads and stores) where every pointer is
// 16-byte aligned, else one element at a time; a grid-stride loop.
#include "gelu_backward_sum.h"

#include "block_tail_tuning.cuh"
#include "common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fno::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;

// LibTorch's GeluBackward (approximate 'none') on one element, with the
// gradient dy as autograd stores the sum of the two: rounded to T.
template <typename T>
__device__ __forceinline__ T grad(T x, T g1, T g2) {
  constexpr float kBeta = static_cast<float>(M_2_SQRTPI * M_SQRT1_2 * 0.5);
  constexpr float kAlpha = static_cast<float>(M_SQRT1_2);
  const float dy = round_to<T>(to_float(g1) + to_float(g2));
  const float xf = to_float(x);
  const float cdf = 0.5f * (1.0f + ::erff(xf * kAlpha));
  const float pdf = ::expf(-0.5f * xf * xf) * kBeta;
  return from_float<T>(dy * (cdf + xf * pdf));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    vector_kernel(const T* __restrict__ x, const T* g1, const T* g2, T* dx, int64_t groups) {
  constexpr int kV = 16 / sizeof(T);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < groups; i += stride) {
    union Pack {
      uint4 u;
      T e[kV];
    };
    Pack px, p1, p2, out;
    px.u = __ldg(reinterpret_cast<const uint4*>(x) + i);
    p1.u = reinterpret_cast<const uint4*>(g1)[i];
    p2.u = reinterpret_cast<const uint4*>(g2)[i];
#pragma unroll
    for (int k = 0; k < kV; ++k) out.e[k] = grad<T>(px.e[k], p1.e[k], p2.e[k]);
    reinterpret_cast<uint4*>(dx)[i] = out.u;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    scalar_kernel(const T* __restrict__ x, const T* g1, const T* g2, T* dx, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = grad<T>(x[i], g1[i], g2[i]);
}

template <typename T>
int run(const void* x, const void* g1, const void* g2, void* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  constexpr int kV = 16 / sizeof(T);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = n % kV == 0 && aligned(x) && aligned(g1) && aligned(g2) && aligned(dx);
  const int64_t items = vec ? n / kV : n;
  const auto blocks = static_cast<unsigned>(blocks_for(items, kThreads, 8));
  const auto* xt = static_cast<const T*>(x);
  const auto* g1t = static_cast<const T*>(g1);
  const auto* g2t = static_cast<const T*>(g2);
  auto* dxt = static_cast<T*>(dx);
  if (vec) {
    vector_kernel<T><<<blocks, kThreads, 0, stream>>>(xt, g1t, g2t, dxt, items);
  } else {
    scalar_kernel<T><<<blocks, kThreads, 0, stream>>>(xt, g1t, g2t, dxt, items);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace
}  // namespace detail

int gelu_backward_sum(Dtype dtype, const void* x, const void* g1, const void* g2, void* dx,
                      int64_t n, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case Dtype::kFloat:
      return detail::run<float>(x, g1, g2, dx, n, s);
    case Dtype::kBFloat16:
      return detail::run<__nv_bfloat16>(x, g1, g2, dx, n, s);
    case Dtype::kHalf:
      return detail::run<__half>(x, g1, g2, dx, n, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace fno::cuda
