// The weight gradients of the tensor-core backward kernels (backward_tc in
// block_tail_backward.cu, backward_recompute_tc in
// block_tail_backward_recompute.cu): a CTA's partial sums into the workspace,
// and the fixed-order sum of the partials over CTAs into the gradients.
#pragma once

#include "block_tail.h"
#include "common.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace fno::cuda::detail {

// The end of a backward kernel: the warps' accumulators (acc_s, acc_1, acc_2
// in the MMA accumulator layout, the vector gradients per lane) summed into
// the CTA's partials at partial + blockIdx.x * kEntries, in the workspace's
// entry order (Shape). The vector gradients are summed over the lanes' rows
// (g) in a fixed tree, then each warp's sums go to `red` (shared memory, free
// for kWarps * kEntries floats: all threads call this after their last use of
// it) and the CTA's warps are added in order: deterministic.
template <int C, int CM>
__device__ __forceinline__ void write_cta_partials(
    const float (&acc_s)[C / 16][C / 8][4], const float (&acc_1)[CM / 16][C / 8][4],
    const float (&acc_2)[C / 16][CM / 8][4], float (&acc_b2)[C / 8][2], float (&acc_gate)[C / 8][2],
    float (&acc_b1)[CM / 8][2], float* red, float* __restrict__ partial) {
  using S = Shape<C, CM>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) {
#pragma unroll
    for (int j = 0; j < C / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        acc_b2[j][e] += __shfl_xor_sync(0xffffffffu, acc_b2[j][e], off);
        acc_gate[j][e] += __shfl_xor_sync(0xffffffffu, acc_gate[j][e], off);
      }
#pragma unroll
    for (int j = 0; j < CM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) acc_b1[j][e] += __shfl_xor_sync(0xffffffffu, acc_b1[j][e], off);
  }
  // Each warp's sums in the workspace's entry order, then the CTA's, warp by warp.
  __syncthreads();
  float* mine = red + warp * S::kEntries;
  constexpr int kOffW1 = C * C, kOffB1 = kOffW1 + CM * C, kOffW2 = kOffB1 + CM,
                kOffB2 = kOffW2 + C * CM, kOffGate = kOffB2 + C;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int dr = (e >> 1) * 8, dc = e & 1;
#pragma unroll
    for (int mt = 0; mt < C / 16; ++mt)
#pragma unroll
      for (int nt = 0; nt < C / 8; ++nt)
        mine[(16 * mt + g + dr) * C + 8 * nt + 2 * t + dc] = acc_s[mt][nt][e];
#pragma unroll
    for (int mt = 0; mt < CM / 16; ++mt)
#pragma unroll
      for (int nt = 0; nt < C / 8; ++nt)
        mine[kOffW1 + (16 * mt + g + dr) * C + 8 * nt + 2 * t + dc] = acc_1[mt][nt][e];
#pragma unroll
    for (int mt = 0; mt < C / 16; ++mt)
#pragma unroll
      for (int nt = 0; nt < CM / 8; ++nt)
        mine[kOffW2 + (16 * mt + g + dr) * CM + 8 * nt + 2 * t + dc] = acc_2[mt][nt][e];
  }
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < C / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        mine[kOffB2 + 8 * j + 2 * t + e] = acc_b2[j][e];
        mine[kOffGate + 8 * j + 2 * t + e] = acc_gate[j][e];
      }
#pragma unroll
    for (int j = 0; j < CM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) mine[kOffB1 + 8 * j + 2 * t + e] = acc_b1[j][e];
  }
  __syncthreads();
  float* out = partial + int64_t{blockIdx.x} * S::kEntries;
  for (int e = threadIdx.x; e < S::kEntries; e += blockDim.x) {
    float v = red[e];
#pragma unroll
    for (int k = 1; k < kWarps; ++k) v += red[k * S::kEntries + e];
    out[e] = v;
  }
}

// The weight gradients g (overwritten) from the partials of `ctas` CTAs of
// `entries` floats each in `workspace`, summed in CTA order
// (reduce_partials_kernel, block_tail_backward.cu); ctas 0 (no points): zeros.
// Returns a cudaError_t.
int reduce_partials(float* workspace, int ctas, int entries, int c, int cm, const BlockTailGrads& g,
                    cudaStream_t stream);

}  // namespace fno::cuda::detail
