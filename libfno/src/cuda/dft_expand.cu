// y[M, S] = z[M, N2] b[N2, S] (dft_expand.h). A CTA walks tiles of kTileRows
// consecutive rows of z: it copies a tile (one contiguous block of memory)
// into shared memory with cp.async, the next tile's copy in flight while it
// computes this one (double buffering), so the kernel waits on one memory
// round trip per tile, not per row. Thread (row group g, column chunk c) of
// the CTA owns columns 4c .. 4c+3 (c < S/4) and keeps its [N2 x 4] slice of b
// in registers for the whole grid; it computes every (256 / (S/4))-th row of
// the tile from g, reading the row's z from shared memory (one broadcast load
// per pair of values), and stores one float4 per row. Consecutive threads
// write consecutive 16 bytes of a row, rows follow each other: the stores
// are fully coalesced.
#include "dft_expand.h"

#include "block_tail_tuning.cuh"
#include "tiles.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace fno::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;
constexpr int kTileRows = 64;     // rows of z a CTA stages at a time
constexpr int kMaxS4 = kThreads;  // a row's column chunks within one CTA

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(gmem) : "memory");
}

// Copies rows r0 .. r0 + rows of z into zs (rows * N2 floats), as one group.
template <int N2>
__device__ __forceinline__ void stage(float* zs, const float* z, int64_t r0, int rows) {
  const float* src = z + r0 * N2;
  const int n = rows * N2;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    for (int i = threadIdx.x; i < n / 4; i += kThreads) cp_async16<0>(zs + 4 * i, src + 4 * i);
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) cp_async4(zs + i, src + i);
  }
  cp_async_commit();
}

template <int N2>
__global__ void __launch_bounds__(kThreads)
    expand_kernel(const float* __restrict__ z, const float* __restrict__ b, float* __restrict__ y,
                  int64_t m, int s4) {
  static_assert(N2 % 2 == 0, "z rows are read as float2");
  __shared__ __align__(16) float zs[2][kTileRows * N2];
  const int groups = kThreads / s4;  // rows computed at once
  const int g = threadIdx.x / s4, c = threadIdx.x - g * s4;
  const bool active = g < groups;
  float4 bc[N2];
  if (active) {
#pragma unroll
    for (int j = 0; j < N2; ++j) bc[j] = __ldg(reinterpret_cast<const float4*>(b) + j * s4 + c);
  }
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  const auto rows_of = [&](int64_t tile) {
    const int64_t left = m - tile * kTileRows;
    return static_cast<int>(left < kTileRows ? left : kTileRows);
  };
  int64_t tile = blockIdx.x;
  if (tile < tiles) stage<N2>(zs[0], z, tile * kTileRows, rows_of(tile));
  for (int buf = 0; tile < tiles; tile += gridDim.x, buf ^= 1) {
    const int64_t next = tile + gridDim.x;
    if (next < tiles) {
      stage<N2>(zs[buf ^ 1], z, next * kTileRows, rows_of(next));
    } else {
      cp_async_commit();  // (an empty group: the wait below counts groups)
    }
    cp_async_wait<1>();
    __syncthreads();
    const int64_t r0 = tile * kTileRows;
    const int rows = rows_of(tile);
    if (active) {
      for (int rr = g; rr < rows; rr += groups) {
        const float2* zr = reinterpret_cast<const float2*>(zs[buf] + rr * N2);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < N2 / 2; ++j) {
          const float2 v = zr[j];
          const float4 &b0 = bc[2 * j], &b1 = bc[2 * j + 1];
          acc.x = fmaf(v.x, b0.x, acc.x);
          acc.y = fmaf(v.x, b0.y, acc.y);
          acc.z = fmaf(v.x, b0.z, acc.z);
          acc.w = fmaf(v.x, b0.w, acc.w);
          acc.x = fmaf(v.y, b1.x, acc.x);
          acc.y = fmaf(v.y, b1.y, acc.y);
          acc.z = fmaf(v.y, b1.z, acc.z);
          acc.w = fmaf(v.y, b1.w, acc.w);
        }
        reinterpret_cast<float4*>(y + (r0 + rr) * (int64_t{4} * s4))[c] = acc;
      }
    }
    __syncthreads();  // (this buffer is staged again two tiles on)
  }
  cp_async_wait<0>();
}

template <int N2>
int launch(const float* z, const float* b, float* y, int64_t m, int64_t s, cudaStream_t stream) {
  const int64_t s4 = s / 4;
  if (s4 > kMaxS4) return static_cast<int>(cudaErrorInvalidValue);
  static const int per_sm = [] {
    int blocks = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, expand_kernel<N2>, kThreads, 0);
    return std::max(blocks, 1);
  }();
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  const auto grid = static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{device_sms()} * per_sm)));
  expand_kernel<N2><<<grid, kThreads, 0, stream>>>(z, b, y, m, static_cast<int>(s4));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace
}  // namespace detail

bool dft_expand_supported(int64_t n2, int64_t s) {
  return (n2 == 16 || n2 == 18 || n2 == 24 || n2 == 32) && s > 0 && s % 4 == 0 &&
         s / 4 <= detail::kMaxS4;
}

int dft_expand(const float* z, const float* b, float* y, int64_t m, int64_t n2, int64_t s,
               void* stream) {
  if (!dft_expand_supported(n2, s) || m < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (m == 0) return 0;
  const auto st = static_cast<cudaStream_t>(stream);
  switch (n2) {
    case 16:
      return detail::launch<16>(z, b, y, m, s, st);
    case 18:
      return detail::launch<18>(z, b, y, m, s, st);
    case 24:
      return detail::launch<24>(z, b, y, m, s, st);
    case 32:
      return detail::launch<32>(z, b, y, m, s, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace fno::cuda
