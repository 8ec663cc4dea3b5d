// What the channel-MLP kernels (channel_mlp.h) share: element loads and
// stores, the weights in shared memory, the grid-point walk and the dispatch
// over dtypes and compiled shapes.
#pragma once

#include "block_tail_tuning.cuh"
#include "channel_mlp.h"
#include "common.cuh"
#include "gelu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fno::cuda::detail::mlp {

__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half(v); }

constexpr int kThreads = 256;

// The weights in shared memory as fp32, rounded to T: w1 [mid][IN], b1 [mid],
// then w2 transposed, [mid][OUT] (row k: the outputs' weights of hidden unit
// k), from a 16-byte boundary.
template <int IN, int OUT>
struct Smem {
  __host__ __device__ static int b1(int mid) { return mid * IN; }
  __host__ __device__ static int w2t(int mid) { return (mid * (IN + 1) + 3) / 4 * 4; }
  __host__ __device__ static int b2(int mid) { return w2t(mid) + mid * OUT; }
  __host__ __device__ static int floats(int mid) { return b2(mid) + OUT; }
};

template <typename T, int IN, int OUT>
__device__ void load_weights(float* sw, int mid, const ChannelMlpWeights& w) {
  using S = Smem<IN, OUT>;
  for (int i = threadIdx.x; i < mid * IN; i += blockDim.x) sw[i] = round_to<T>(w.w1[i]);
  for (int i = threadIdx.x; i < mid; i += blockDim.x)
    sw[S::b1(mid) + i] = w.b1 != nullptr ? round_to<T>(w.b1[i]) : 0.f;
  for (int i = threadIdx.x; i < mid * OUT; i += blockDim.x) {
    const int o = i / mid, k = i - o * mid;  // w2 [OUT][mid] -> [mid][OUT]
    sw[S::w2t(mid) + k * OUT + o] = round_to<T>(w.w2[i]);
  }
  for (int i = threadIdx.x; i < OUT; i += blockDim.x)
    sw[S::b2(mid) + i] = w.b2 != nullptr ? round_to<T>(w.b2[i]) : 0.f;
}

// act(x) at grid point i of batch entry b, as floats (rounded to T after the
// GELU, as the stored GELU(x) of the LibTorch path is).
template <typename T, int IN>
__device__ __forceinline__ void load_input(float (&v)[IN], const T* x, int64_t batch_stride,
                                           int64_t channel_stride, int64_t b, int64_t i,
                                           bool gelu_input) {
  const T* p = x + b * batch_stride + i;
#pragma unroll
  for (int c = 0; c < IN; ++c) {
    const float xv = load(p + c * channel_stride);
    v[c] = gelu_input ? round_to<T>(gelu_fast(xv)) : xv;
  }
}

// R consecutive floats of shared memory (float4 loads when R % 4 == 0: p is
// then 16-byte aligned, as the weights' rows are).
template <int R>
__device__ __forceinline__ void load_row(float (&v)[R], const float* p) {
  if constexpr (R % 4 == 0) {
#pragma unroll
    for (int j = 0; j < R; j += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + j);
      v[j] = q.x, v[j + 1] = q.y, v[j + 2] = q.z, v[j + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < R; ++j) v[j] = p[j];
  }
}

// init + sum_k row[k] v[k], in order of k (row as load_row's).
template <int R>
__device__ __forceinline__ float dot(const float* row, const float (&v)[R], float init) {
  float w[R];
  load_row<R>(w, row);
#pragma unroll
  for (int k = 0; k < R; ++k) init = fmaf(w[k], v[k], init);
  return init;
}

// h = W1 v + b1 for hidden unit k, rounded to T.
template <typename T, int IN>
__device__ __forceinline__ float hidden(const float* sw, int mid, int k, const float (&v)[IN]) {
  return round_to<T>(dot<IN>(sw + k * IN, v, sw[mid * IN + k]));
}

// The compiled (Cin, Cout) pairs, kCompiledChannelMlps; F<T, IN, OUT>::run(args...).
template <template <typename, int, int> class F, typename T, typename... Args>
int by_shape(int64_t in, int64_t out, Args... args) {
  if (in == 3 && out == 32) return F<T, 3, 32>::run(args...);
  if (in == 4 && out == 32) return F<T, 4, 32>::run(args...);
  if (in == 32 && out == 1) return F<T, 32, 1>::run(args...);
  if (in == 20 && out == 20) return F<T, 20, 20>::run(args...);
  if (in == 20 && out == 1) return F<T, 20, 1>::run(args...);
  return static_cast<int>(cudaErrorInvalidValue);
}

template <template <typename, int, int> class F, typename... Args>
int dispatch(Dtype dtype, int64_t in, int64_t out, Args... args) {
  switch (dtype) {
    case Dtype::kFloat:
      return by_shape<F, float>(in, out, args...);
    case Dtype::kBFloat16:
      return by_shape<F, __nv_bfloat16>(in, out, args...);
    case Dtype::kHalf:
      return by_shape<F, __half>(in, out, args...);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace fno::cuda::detail::mlp
