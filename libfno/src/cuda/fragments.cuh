// Per-point values in the MMA accumulator layout: moving them between the
// staged [channel][point] rows and registers (ldmatrix / stmatrix .trans for
// 16-bit types), their packed 16-bit form, and per-column fills.
#pragma once

#include "common.cuh"
#include "mma.cuh"

#include <cstdint>

namespace fno::cuda::detail {

// Per-point values of 16 points x K channels in the accumulator layout:
// v[j][0..3] = (point g, channel 8j + 2t), (g, 8j + 2t + 1), (g + 8, 8j + 2t),
// (g + 8, 8j + 2t + 1), with g = lane / 4, t = lane % 4.
// 16-bit types: ldmatrix / stmatrix .trans of four 8 x 8 blocks ([8 channels]
// x [8 points] of the staged rows: channel rows 8j.., points r0 or r0 + 8) per
// instruction; lane l gives row l % 8 of block l / 8. A lane's register i
// holds (channel 2t, point g) and (2t + 1, g) of block i: the layout above.
// (Each lane writes only the elements it reads: a group's outputs may replace
// its inputs in place.)
template <typename T, int K>
__device__ __forceinline__ const T* ldsm_row(const T* buf, int r0, int j, int lane) {
  const int blk = lane >> 3;
  return buf + (8 * (j + (blk >> 1)) + (lane & 7)) * Geo<T>::kS + r0 + 8 * (blk & 1);
}
template <typename T, int K>
__device__ __forceinline__ void load_acc(const T* buf, int r0, int lane, float (&v)[K / 8][4]) {
  constexpr int S = Geo<T>::kS;
  if constexpr (sizeof(T) == 2) {
    static_assert(K % 16 == 0, "whole 8 x 8 block pairs");
#pragma unroll
    for (int j = 0; j < K / 8; j += 2) {
      uint32_t r[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(smem_addr(ldsm_row<T, K>(buf, r0, j, lane)))
                   : "memory");
      unpack(r[0], v[j][0], v[j][1], static_cast<T*>(nullptr));
      unpack(r[1], v[j][2], v[j][3], static_cast<T*>(nullptr));
      unpack(r[2], v[j + 1][0], v[j + 1][1], static_cast<T*>(nullptr));
      unpack(r[3], v[j + 1][2], v[j + 1][3], static_cast<T*>(nullptr));
    }
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < K / 8; ++j) {
      const T* p = buf + (8 * j + 2 * t) * S + r0 + g;
      v[j][0] = to_f(p[0]);
      v[j][1] = to_f(p[S]);
      v[j][2] = to_f(p[8]);
      v[j][3] = to_f(p[S + 8]);
    }
  }
}
template <typename T, int K>
__device__ __forceinline__ void store_acc(T* buf, int r0, int lane, const float (&v)[K / 8][4]) {
  constexpr int S = Geo<T>::kS;
  if constexpr (sizeof(T) == 2) {
    static_assert(K % 16 == 0, "whole 8 x 8 block pairs");
#pragma unroll
    for (int j = 0; j < K / 8; j += 2) {
      const uint32_t r0w = Mma<T>::pack(v[j][0], v[j][1]), r1w = Mma<T>::pack(v[j][2], v[j][3]),
                     r2w = Mma<T>::pack(v[j + 1][0], v[j + 1][1]),
                     r3w = Mma<T>::pack(v[j + 1][2], v[j + 1][3]);
      asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};" ::"r"(
                       smem_addr(ldsm_row<T, K>(buf, r0, j, lane))),
                   "r"(r0w), "r"(r1w), "r"(r2w), "r"(r3w)
                   : "memory");
    }
  } else {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < K / 8; ++j) {
      T* p = buf + (8 * j + 2 * t) * S + r0 + g;
      from_f(p[0], v[j][0]);
      from_f(p[S], v[j][1]);
      from_f(p[8], v[j][2]);
      from_f(p[S + 8], v[j][3]);
    }
  }
}
// The packed form of a [16 x K] accumulator-layout matrix of 16-bit values:
// p[j][0] = (v[j][0], v[j][1]), p[j][1] = (v[j][2], v[j][3]), low half first.
// It is at once the MMA A fragment (afrag) and what ldmatrix / stmatrix .trans
// move, so a value rounded to T once serves the product and the store.
template <typename T, int K>
__device__ __forceinline__ void pack_acc(const float (&v)[K / 8][4], uint32_t (&p)[K / 8][2]) {
#pragma unroll
  for (int j = 0; j < K / 8; ++j) {
    p[j][0] = Mma<T>::pack(v[j][0], v[j][1]);
    p[j][1] = Mma<T>::pack(v[j][2], v[j][3]);
  }
}
template <typename T, int K>
__device__ __forceinline__ void unpack_acc(const uint32_t (&p)[K / 8][2], float (&v)[K / 8][4]) {
#pragma unroll
  for (int j = 0; j < K / 8; ++j) {
    unpack(p[j][0], v[j][0], v[j][1], static_cast<T*>(nullptr));
    unpack(p[j][1], v[j][2], v[j][3], static_cast<T*>(nullptr));
  }
}
template <typename T, int K>
__device__ __forceinline__ void ldsm_packed(const T* buf, int r0, int lane,
                                            uint32_t (&p)[K / 8][2]) {
  static_assert(sizeof(T) == 2 && K % 16 == 0, "16-bit types, whole 8 x 8 block pairs");
#pragma unroll
  for (int j = 0; j < K / 8; j += 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(p[j][0]), "=r"(p[j][1]), "=r"(p[j + 1][0]), "=r"(p[j + 1][1])
                 : "r"(smem_addr(ldsm_row<T, K>(buf, r0, j, lane)))
                 : "memory");
  }
}
template <typename T, int K>
__device__ __forceinline__ void stsm_packed(T* buf, int r0, int lane,
                                            const uint32_t (&p)[K / 8][2]) {
  static_assert(sizeof(T) == 2 && K % 16 == 0, "16-bit types, whole 8 x 8 block pairs");
#pragma unroll
  for (int j = 0; j < K / 8; j += 2) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};" ::"r"(
                     smem_addr(ldsm_row<T, K>(buf, r0, j, lane))),
                 "r"(p[j][0]), "r"(p[j][1]), "r"(p[j + 1][0]), "r"(p[j + 1][1])
                 : "memory");
  }
}

template <typename T, int K>
__device__ __forceinline__ void round_acc(float (&v)[K / 8][4]) {
#pragma unroll
  for (int j = 0; j < K / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) v[j][e] = round_to<T>(v[j][e]);
}
// Per-column values (bias, gate) in the accumulator layout.
template <int K>
__device__ __forceinline__ void fill_cols(const float* col, int lane, float (&v)[K / 8][4]) {
  const int t = lane & 3;
#pragma unroll
  for (int j = 0; j < K / 8; ++j) {
    v[j][0] = v[j][2] = col[8 * j + 2 * t];
    v[j][1] = v[j][3] = col[8 * j + 2 * t + 1];
  }
}

}  // namespace fno::cuda::detail
