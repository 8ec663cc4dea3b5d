// The weight gradient of a pointwise channel map (channel_wgrad.h).
//
// partial_kernel: a CTA takes (entry, kTile-point) tiles t = blockIdx.x,
// blockIdx.x + gridDim.x, ...; per tile its threads stage both operands'
// rows in shared memory (as fp32, coalesced along the grid, zero-padded to
// whole register blocks and tiles), then each thread adds the products of its
// kR x kR block of (output channel, input channel) pairs over its share of the
// tile's points (the points are split over as many thread groups as the
// blocks leave room for), in a fresh fp32 accumulator per tile (at most
// kTile terms), added to the thread's fp64 sums after the tile: no fp32
// accumulator grows with the grid. After its last tile the CTA adds its
// groups' sums in group order, in fp64, and writes one [Cout, Cin] partial
// (rounded once to fp32); reduce_kernel adds the partials in a fixed order,
// in fp64, into gw.
#include "block_tail_tuning.cuh"
#include "channel_wgrad.h"
#include "common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace fno::cuda {
namespace detail::wgrad {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 64;          // grid points per tile
constexpr int kRow = kTile + 1;    // a staged row's stride (no bank conflicts across rows)
constexpr int kR = 4;              // a thread's block: kR output x kR input channels
constexpr int kCtasPerSm = 8;      // CTAs a multiprocessor at most: their loads overlap
constexpr int kMinTiles = 2;       // tiles a CTA takes at least
constexpr int kMaxEntries = 4096;  // padded Cout x Cin: one block per thread at most
constexpr int kSmemBytes = 48 * 1024;

__host__ __device__ constexpr int padded(int c) { return (c + kR - 1) / kR * kR; }

// Bytes of shared memory a CTA uses: the staged tile, or the CTA's fp64 sums.
int smem_bytes(int cout, int cin) {
  const int tile = (padded(cout) + padded(cin)) * kRow;
  return std::max(static_cast<int>(sizeof(float)) * tile,
                  static_cast<int>(sizeof(double)) * cout * cin);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    partial_kernel(const T* __restrict__ gy, int64_t gy_batch, int64_t gy_channel,
                   const T* __restrict__ h, int64_t h_batch, int64_t h_channel, int64_t n,
                   int64_t tiles_per_entry, int64_t tiles, int cout, int cin,
                   float* __restrict__ partial) {
  extern __shared__ __align__(16) float smem[];
  const int co_pad = padded(cout), ci_pad = padded(cin);
  const int rows = co_pad + ci_pad;
  const float* sy = smem;                  // [co_pad][kRow]: gy's rows
  const float* sh = smem + co_pad * kRow;  // [ci_pad][kRow]: h's rows
  const int bi = ci_pad / kR;
  const int blocks = (co_pad / kR) * bi;
  const int groups = max(1, kThreads / blocks);
  const int tid = threadIdx.x;
  const int blk = tid % blocks, grp = tid / blocks;
  const bool active = grp < groups;
  const int r0 = (blk / bi) * kR, c0 = (blk % bi) * kR;
  double acc[kR][kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) {
#pragma unroll
    for (int j = 0; j < kR; ++j) acc[i][j] = 0.0;
  }
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / tiles_per_entry;
    const int64_t n0 = (t - b * tiles_per_entry) * kTile;
    const int len = static_cast<int>(min(int64_t{kTile}, n - n0));
    __syncthreads();  // the previous tile is read
    for (int i = tid; i < rows * kTile; i += kThreads) {
      const int row = i / kTile, p = i - row * kTile;
      float v = 0.f;
      if (p < len) {
        if (row < cout) {
          v = to_float(gy[b * gy_batch + row * gy_channel + n0 + p]);
        } else if (row >= co_pad && row - co_pad < cin) {
          v = to_float(h[b * h_batch + (row - co_pad) * h_channel + n0 + p]);
        }
      }
      smem[row * kRow + p] = v;
    }
    __syncthreads();
    if (active) {
      float t[kR][kR] = {};
      for (int p = grp; p < len; p += groups) {
        float a[kR], c[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          a[r] = sy[(r0 + r) * kRow + p];
          c[r] = sh[(c0 + r) * kRow + p];
        }
#pragma unroll
        for (int i = 0; i < kR; ++i) {
#pragma unroll
          for (int j = 0; j < kR; ++j) t[i][j] = fmaf(a[i], c[j], t[i][j]);
        }
      }
#pragma unroll
      for (int i = 0; i < kR; ++i) {
#pragma unroll
        for (int j = 0; j < kR; ++j) acc[i][j] += t[i][j];
      }
    }
  }
  __syncthreads();  // the staged rows are done with: the CTA's sums go there
  const int entries = cout * cin;
  double* red = reinterpret_cast<double*>(smem);  // [cout * cin], the groups' added in order
  for (int e = tid; e < entries; e += kThreads) red[e] = 0.0;
  __syncthreads();
  for (int g = 0; g < groups; ++g) {
    if (active && grp == g) {
#pragma unroll
      for (int i = 0; i < kR; ++i) {
#pragma unroll
        for (int j = 0; j < kR; ++j) {
          if (r0 + i < cout && c0 + j < cin) red[(r0 + i) * cin + c0 + j] += acc[i][j];
        }
      }
    }
    __syncthreads();
  }
  float* out = partial + int64_t{blockIdx.x} * entries;
  for (int e = tid; e < entries; e += kThreads) out[e] = static_cast<float>(red[e]);
}

// gw += the `ctas` partials: a block takes kReduceEntries entries, each
// summed by kReduceLanes lanes (lane j: partials j, j + kReduceLanes, ...,
// coalesced across entries), whose sums are then added in lane order: a fixed
// order (deterministic), and enough threads in flight to hide the loads.
constexpr int kReduceEntries = 32;
constexpr int kReduceLanes = 8;

__global__ void __launch_bounds__(kReduceEntries* kReduceLanes)
    reduce_kernel(const float* __restrict__ partial, int64_t ctas, int entries,
                  float* __restrict__ gw) {
  __shared__ double sums[kReduceLanes][kReduceEntries];
  const int i = threadIdx.x % kReduceEntries, lane = threadIdx.x / kReduceEntries;
  const int e = blockIdx.x * kReduceEntries + i;
  double s = 0.0;
  if (e < entries) {
#pragma unroll 4
    for (int64_t k = lane; k < ctas; k += kReduceLanes) s += partial[k * entries + e];
  }
  sums[lane][i] = s;
  __syncthreads();
  if (lane == 0 && e < entries) {
    double total = sums[0][i];
#pragma unroll
    for (int j = 1; j < kReduceLanes; ++j) total += sums[j][i];
    gw[e] = static_cast<float>(static_cast<double>(gw[e]) + total);
  }
}

int64_t tiles_of(int64_t batch, int64_t n) { return batch * ((n + kTile - 1) / kTile); }

// At least kMinTiles tiles a CTA (fewer partials to add), at most kCtasPerSm
// CTAs a multiprocessor: a CTA waits for each tile's loads, so several per
// multiprocessor keep the memory busy.
int64_t ctas_for(int64_t tiles) {
  return std::max<int64_t>(1, std::min<int64_t>((tiles + kMinTiles - 1) / kMinTiles,
                                                int64_t{cuda::detail::device_sms()} * kCtasPerSm));
}

template <typename T>
int run(WgradOperand gy, WgradOperand h, int64_t batch, int cout, int cin, int64_t n,
        float* workspace, float* gw, cudaStream_t stream) {
  const int64_t tiles = tiles_of(batch, n);
  if (tiles == 0) return 0;
  const int64_t ctas = ctas_for(tiles);
  partial_kernel<T><<<static_cast<unsigned>(ctas), kThreads, smem_bytes(cout, cin), stream>>>(
      static_cast<const T*>(gy.data), gy.batch_stride, gy.channel_stride,
      static_cast<const T*>(h.data), h.batch_stride, h.channel_stride, n, (n + kTile - 1) / kTile,
      tiles, cout, cin, workspace);
  if (const auto err = cudaGetLastError()) return static_cast<int>(err);
  const int entries = cout * cin;
  reduce_kernel<<<(entries + kReduceEntries - 1) / kReduceEntries, kReduceEntries * kReduceLanes, 0,
                  stream>>>(workspace, ctas, entries, gw);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace
}  // namespace detail::wgrad

bool channel_wgrad_supported(int64_t cout, int64_t cin) {
  using namespace detail::wgrad;
  if (cout < 1 || cin < 1 || cout + cin > kMaxWgradChannels) return false;
  const int co = static_cast<int>(cout), ci = static_cast<int>(cin);
  return padded(co) * padded(ci) <= kMaxEntries && smem_bytes(co, ci) <= kSmemBytes;
}

int64_t channel_wgrad_workspace(int64_t batch, int64_t n, int64_t cout, int64_t cin) {
  using namespace detail::wgrad;
  return ctas_for(tiles_of(batch, n)) * cout * cin;
}

int channel_wgrad(Dtype dtype, WgradOperand gy, WgradOperand h, int64_t batch, int64_t cout,
                  int64_t cin, int64_t n, float* workspace, float* gw, void* stream) {
  if (!channel_wgrad_supported(cout, cin) || batch < 0 || n < 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const auto s = static_cast<cudaStream_t>(stream);
  const int co = static_cast<int>(cout), ci = static_cast<int>(cin);
  switch (dtype) {
    case Dtype::kBFloat16:
      return detail::wgrad::run<__nv_bfloat16>(gy, h, batch, co, ci, n, workspace, gw, s);
    case Dtype::kHalf:
      return detail::wgrad::run<__half>(gy, h, batch, co, ci, n, workspace, gw, s);
    default:
      return detail::wgrad::run<float>(gy, h, batch, co, ci, n, workspace, gw, s);
  }
}

}  // namespace fno::cuda
