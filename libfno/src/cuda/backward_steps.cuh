// What the two tensor-core backward kernels share (backward_tc in
// block_tail_backward.cu, backward_recompute_tc in
// block_tail_backward_recompute.cu): the four weight fragments at the front
// of their shared memory, their gradient accumulators, and each 16-point
// group's steps from dh on. Both kernels stage their rows as common.cuh
// describes; the products are mma.cuh's.
#pragma once

#include "block_tail.h"
#include "common.cuh"
#include "fragments.cuh"
#include "mma.cuh"
#include "partials.cuh"

#include <cstdint>

namespace fno::cuda::detail {

// The B fragments both backward kernels multiply by, first in their shared
// memory (kWords words); a kernel's own fragments follow.
template <typename T, int C, int CM, bool X3>
struct BwdFrags {
  static constexpr int kW1 = 0;                                      // B(i, k) = W1[k][i]
  static constexpr int kW2 = kW1 + BFrag<T, C, CM, X3>::kWords;      // B(i, k) = W2[i][k]
  static constexpr int kW1n = kW2 + BFrag<T, C, CM, X3>::kWords;     // B(k, i) = W1[k][i]
  static constexpr int kWSkip = kW1n + BFrag<T, CM, C, X3>::kWords;  // B(i, j) = W_skip[i][j]
  static constexpr int kWords = kWSkip + BFrag<T, C, C, X3>::kWords;

  // Writes the four fragments at fr (all the CTA's threads; a __syncthreads
  // must follow before they are read).
  static __device__ __forceinline__ void build(uint32_t* fr, const BlockTailWeights& w) {
    build_bfrag<T, C, CM, X3>(fr + kW1, [&](int k, int nn) { return w.w1[nn * C + k]; });
    build_bfrag<T, C, CM, X3>(fr + kW2, [&](int k, int nn) { return w.w2[k * CM + nn]; });
    build_bfrag<T, CM, C, X3>(fr + kW1n, [&](int k, int nn) { return w.w1[k * C + nn]; });
    build_bfrag<T, C, C, X3>(fr + kWSkip, [&](int k, int nn) { return w.w_skip[k * C + nn]; });
  }
};

// A warp's weight-gradient sums over its points, and the per-point steps
// that feed them.
template <typename T, int C, int CM, bool X3>
struct BwdAcc {
  using F = BwdFrags<T, C, CM, X3>;
  float s[C / 16][C / 8][4] = {};    // dW_skip[i][j] = sum dy1_i a_j
  float w1[CM / 16][C / 8][4] = {};  // dW1[k][i] = sum dh_k act(y1)_i
  float w2[C / 16][CM / 8][4] = {};  // dW2[i][k] = sum dz_i GELU(h)_k
  float b2[C / 8][2] = {}, gate[C / 8][2] = {}, b1[CM / 8][2] = {};

  // b1's gradient: the sum of dh (as rounded).
  __device__ __forceinline__ void add_b1(const float (&dh)[CM / 8][4]) {
#pragma unroll
    for (int j = 0; j < CM / 8; ++j) {
      b1[j][0] += dh[j][0] + dh[j][2];
      b1[j][1] += dh[j][1] + dh[j][3];
    }
  }

  // da's start, gate * dz, into dav; b2's and the gate's gradients: sums of
  // dz and dz * a.
  __device__ __forceinline__ void start_da(const float* sgate, int lane,
                                           const float (&dzv)[C / 8][4],
                                           const float (&av)[C / 8][4], float (&dav)[C / 8][4]) {
    fill_cols<C>(sgate, lane, dav);
#pragma unroll
    for (int j = 0; j < C / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dav[j][e] *= dzv[j][e];
      b2[j][0] += dzv[j][0] + dzv[j][2];
      b2[j][1] += dzv[j][1] + dzv[j][3];
      gate[j][0] = fmaf(dzv[j][0], av[j][0], fmaf(dzv[j][2], av[j][2], gate[j][0]));
      gate[j][1] = fmaf(dzv[j][1], av[j][1], fmaf(dzv[j][3], av[j][3], gate[j][1]));
    }
  }

  // A group's steps from dh (GELU'(h) * W2^T dz, rounded to T and staged):
  // b1's gradient; dy1 = act'(y1) * W1^T dh, rounded to T and stored at
  // s_dy (the spectral output's gradient ds too; d1 = act'(y1) is read where
  // kGeluMid); then da = W_skip^T dy1 + gate * dz into dav, with b2's and
  // the gate's gradients. fr: the fragments (BwdFrags first).
  template <bool kGeluMid>
  __device__ __forceinline__ void from_dh(const float (&dh)[CM / 8][4], const float (&d1)[C / 8][4],
                                          const float (&dzv)[C / 8][4], const float (&av)[C / 8][4],
                                          const uint32_t* fr, const float* sgate, T* s_dy, int r0,
                                          int lane, float (&dav)[C / 8][4]) {
    add_b1(dh);
    float dy[C / 8][4] = {};
    mm<T, CM, C, X3>(dy, dh, fr + F::kW1n, lane);
#pragma unroll
    for (int j = 0; j < C / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (kGeluMid) dy[j][e] *= d1[j][e];
        dy[j][e] = round_to<T>(dy[j][e]);
      }
    store_acc<T, C>(s_dy, r0, lane, dy);
    start_da(sgate, lane, dzv, av, dav);
    mm<T, C, C, X3>(dav, dy, fr + F::kWSkip, lane);
  }

  // The weight gradients over the 16 staged points r0..: dW_skip from dy1
  // and a, dW1 from dh and act(y1), dW2 from dz and GELU(h).
  __device__ __forceinline__ void add_points(const T* s_dy, const T* s_a, const T* s_dh,
                                             const T* s_g1, const T* s_dz, const T* s_gh, int r0,
                                             int lane) {
    mm_points<T, C, C, X3>(s, s_dy, s_a, r0, lane);
    mm_points<T, CM, C, X3>(w1, s_dh, s_g1, r0, lane);
    mm_points<T, C, CM, X3>(w2, s_dz, s_gh, r0, lane);
  }

  // The CTA's partials (write_cta_partials; red: shared memory free for
  // kWarps * Shape<C, CM>::kEntries floats).
  __device__ __forceinline__ void write(float* red, float* __restrict__ partial) {
    write_cta_partials<C, CM>(s, w1, w2, b2, gate, b1, red, partial);
  }
};

}  // namespace fno::cuda::detail
