// Tensor-core products for the block-tail kernels: the mma.sync wrappers
// (Mma<T>), TF32 rounding and the 3xTF32 split, A and B fragments, and the
// per-point channel products (mm, mm_packed) and per-tile weight-gradient
// products (mm_points) built on them.
#pragma once

#include "common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fno::cuda::detail {

// MMA traits. kK: the K of one MMA. For TF32 the K index inside a chunk of 8
// is permuted (position t <-> column 2t, t + 4 <-> 2t + 1) in both operands,
// which leaves the product unchanged and lets the accumulator layout feed A.
template <typename T>
struct Mma;
// TF32 (the fp32 path). 3xTF32 (fp32-level products, as CUTLASS's):
// x = big + small, each rounded to TF32 (11 + 11 significant bits), and
// x y ~ small_x big_y + big_x small_y + big_x big_y (small_x small_y, about
// 2^-22 relative, dropped), accumulated in fp32.
// Rounding to TF32 is cvt.rna.tf32.f32's (to nearest, ties away from zero) done
// on the bits: half a TF32 ulp added to the magnitude, the low 13 bits then
// cleared (sm_90 runs the cvt as 7 instructions with an inf/NaN guard; these
// are 2, and the same for finite x). A small part is not cleared: the MMAs
// read only a TF32 operand's upper 19 bits.
__device__ __forceinline__ uint32_t tf32(float x) {
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = tf32(x);
  small = __float_as_uint(x - __uint_as_float(big)) + 0x1000u;
}
template <>
struct Mma<float> {
  static constexpr int kK = 8;
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Mma<__nv_bfloat16> {
  static constexpr int kK = 16;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Mma<__half> {
  static constexpr int kK = 16;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// The A fragment of K-chunk q of a [16 x K] accumulator-layout matrix (3xTF32:
// also its small parts in as).
template <typename T, int KT, bool X3 = false>
__device__ __forceinline__ void afrag(const float (&v)[KT][4], int q, uint32_t (&a)[4],
                                      uint32_t (&as)[4]) {
  if constexpr (Mma<T>::kK == 16) {
    a[0] = Mma<T>::pack(v[2 * q][0], v[2 * q][1]);
    a[1] = Mma<T>::pack(v[2 * q][2], v[2 * q][3]);
    a[2] = Mma<T>::pack(v[2 * q + 1][0], v[2 * q + 1][1]);
    a[3] = Mma<T>::pack(v[2 * q + 1][2], v[2 * q + 1][3]);
  } else if constexpr (X3) {
    split_tf32(v[q][0], a[0], as[0]);
    split_tf32(v[q][2], a[1], as[1]);
    split_tf32(v[q][1], a[2], as[2]);
    split_tf32(v[q][3], a[3], as[3]);
  } else {
    a[0] = tf32(v[q][0]);
    a[1] = tf32(v[q][2]);
    a[2] = tf32(v[q][1]);
    a[3] = tf32(v[q][3]);
  }
}

// B fragments of a [K x N] weight operand B(k, n), in shared memory as
// [K-chunk][n-tile][pair][lane][2] words: a lane's pair of registers for one
// MMA is one 8-byte load (a warp's: 256 consecutive bytes, conflict-free);
// 3xTF32: pair 0 the big parts, pair 1 the small ones.
template <typename T, int K, int N, bool X3 = false>
struct BFrag {
  static constexpr int kRegs = X3 ? 4 : 2;
  static constexpr int kWords = (K / Mma<T>::kK) * (N / 8) * kRegs * 32;
};
template <typename T, int K, int N, bool X3 = false, class F>
__device__ void build_bfrag(uint32_t* dst, F b) {
  constexpr int RG = BFrag<T, K, N, X3>::kRegs;
  for (int i = threadIdx.x; i < BFrag<T, K, N, X3>::kWords; i += blockDim.x) {
    const int r = i % 2, lane = (i / 2) % 32, pair = (i / 64) % (RG / 2),
              nt = (i / (32 * RG)) % (N / 8), q = i / (32 * RG * (N / 8));
    const int g = lane >> 2, t = lane & 3, n = 8 * nt + g;
    if constexpr (Mma<T>::kK == 16) {
      const int k = 16 * q + 2 * t + 8 * r;
      dst[i] = Mma<T>::pack(b(k, n), b(k + 1, n));
    } else {
      const float v = b(8 * q + 2 * t + r, n);
      const uint32_t big = tf32(v);
      dst[i] = pair == 0 ? big : tf32(v - __uint_as_float(big));
    }
  }
}
// This lane's register pair `pair` for K-chunk q, n-tile nt.
template <int N, int RG>
__device__ __forceinline__ uint2 bfrag(const uint32_t* bf, int q, int nt, int pair, int lane) {
  return *reinterpret_cast<const uint2*>(bf + ((q * (N / 8) + nt) * (RG / 2) + pair) * 64 +
                                         2 * lane);
}

// acc[16 x N] += v[16 x K] * B with single-part operands: v's TF32 (or
// 16-bit) values against register pair 0 of fragments with RG registers (the
// big parts where RG = 4).
template <typename T, int K, int N, int RG>
__device__ __forceinline__ void mm_pass(float (&acc)[N / 8][4], const float (&v)[K / 8][4],
                                        const uint32_t* bf, int lane) {
#pragma unroll
  for (int q = 0; q < K / Mma<T>::kK; ++q) {
    uint32_t a[4], as[4];
    afrag<T, K / 8, false>(v, q, a, as);
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {
      const uint2 b = bfrag<N, RG>(bf, q, nt, 0, lane);
      Mma<T>::mma(acc[nt], a, b.x, b.y);
    }
  }
}

// acc[16 x N] += v[16 x K] * B, B from build_bfrag.
// 3xTF32: the tensor cores truncate each MMA's sum to fp32, so the products go
// first into a zeroed accumulator, every small-part product before the big
// ones (the truncations then fall at the products' own magnitude, and 4 of
// them at the full one instead of 12), and reach acc through an fp32 add.
// With few n-tiles (N <= 16: few independent MMA chains) the big products go
// into a second zeroed accumulator in the same pass instead.
template <typename T, int K, int N, bool X3 = false>
__device__ __forceinline__ void mm(float (&acc)[N / 8][4], const float (&v)[K / 8][4],
                                   const uint32_t* bf, int lane) {
  if constexpr (X3) {
    constexpr bool kTwo = N <= 16;
    float part[N / 8][4] = {}, big[kTwo ? N / 8 : 1][4] = {};
#pragma unroll
    for (int q = 0; q < K / 8; ++q) {
      uint32_t a[4], as[4];
      afrag<T, K / 8, true>(v, q, a, as);
#pragma unroll
      for (int nt = 0; nt < N / 8; ++nt) {
        const uint2 b = bfrag<N, 4>(bf, q, nt, 0, lane), bs = bfrag<N, 4>(bf, q, nt, 1, lane);
        Mma<T>::mma(part[nt], as, b.x, b.y);
        Mma<T>::mma(part[nt], a, bs.x, bs.y);
        if constexpr (kTwo) Mma<T>::mma(big[nt], a, b.x, b.y);
      }
    }
    if constexpr (!kTwo) mm_pass<T, K, N, 4>(part, v, bf, lane);
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] += kTwo ? big[nt][e] + part[nt][e] : part[nt][e];
  } else {
    mm_pass<T, K, N, 2>(acc, v, bf, lane);
  }
}

// acc[16 x N] += v[16 x K] * B with v in packed form (16-bit types).
template <typename T, int K, int N>
__device__ __forceinline__ void mm_packed(float (&acc)[N / 8][4], const uint32_t (&p)[K / 8][2],
                                          const uint32_t* bf, int lane) {
  static_assert(Mma<T>::kK == 16, "16-bit types");
#pragma unroll
  for (int q = 0; q < K / 16; ++q) {
    const uint32_t a[4] = {p[2 * q][0], p[2 * q][1], p[2 * q + 1][0], p[2 * q + 1][1]};
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {
      const uint2 b = bfrag<N, 2>(bf, q, nt, 0, lane);
      Mma<T>::mma(acc[nt], a, b.x, b.y);
    }
  }
}

// Weight-gradient product over the 16 points r0.. of a tile:
// acc[m][n] += sum_p A[m][p] * B[n][p], A ([MR][kS]) and B ([NR][kS]) staged rows,
// summed inside the MMAs (mm_points below).
template <typename T, int MR, int NR, bool X3 = false>
__device__ __forceinline__ void mm_points_in(float (&acc)[MR / 16][NR / 8][4], const T* A,
                                             const T* B, int r0, int lane) {
  constexpr int S = Geo<T>::kS;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int kc = 0; kc < 16; kc += Mma<T>::kK) {
    const int k = r0 + kc + 2 * t;
    uint32_t b[NR / 8][2], bs[NR / 8][2];
#pragma unroll
    for (int nt = 0; nt < NR / 8; ++nt) {
      const T* p = B + (8 * nt + g) * S + k;
      if constexpr (Mma<T>::kK == 16) {
        b[nt][0] = *reinterpret_cast<const uint32_t*>(p);
        b[nt][1] = *reinterpret_cast<const uint32_t*>(p + 8);
      } else if constexpr (X3) {
        const float2 f = *reinterpret_cast<const float2*>(p);
        split_tf32(f.x, b[nt][0], bs[nt][0]);
        split_tf32(f.y, b[nt][1], bs[nt][1]);
      } else {
        const float2 f = *reinterpret_cast<const float2*>(p);
        b[nt][0] = tf32(f.x);
        b[nt][1] = tf32(f.y);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MR / 16; ++mt) {
      const T* p = A + (16 * mt + g) * S + k;
      uint32_t a[4], as[4];
      if constexpr (Mma<T>::kK == 16) {
        a[0] = *reinterpret_cast<const uint32_t*>(p);
        a[1] = *reinterpret_cast<const uint32_t*>(p + 8 * S);
        a[2] = *reinterpret_cast<const uint32_t*>(p + 8);
        a[3] = *reinterpret_cast<const uint32_t*>(p + 8 * S + 8);
      } else {
        const float2 f0 = *reinterpret_cast<const float2*>(p);
        const float2 f1 = *reinterpret_cast<const float2*>(p + 8 * S);
        if constexpr (X3) {
          split_tf32(f0.x, a[0], as[0]);
          split_tf32(f1.x, a[1], as[1]);
          split_tf32(f0.y, a[2], as[2]);
          split_tf32(f1.y, a[3], as[3]);
        } else {
          a[0] = tf32(f0.x);
          a[1] = tf32(f1.x);
          a[2] = tf32(f0.y);
          a[3] = tf32(f1.y);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NR / 8; ++nt) {
        if constexpr (X3) {
          Mma<T>::mma(acc[mt][nt], as, b[nt][0], b[nt][1]);
          Mma<T>::mma(acc[mt][nt], a, bs[nt][0], bs[nt][1]);
        }
        Mma<T>::mma(acc[mt][nt], a, b[nt][0], b[nt][1]);
      }
    }
  }
}

// The same; in 3xTF32 each 16-row block's products over these points go into a
// zeroed accumulator and then into acc with fp32 adds: the tensor cores
// truncate each MMA's sum, and a sum run inside the MMAs over all of a warp's
// tiles (hundreds at 1024^2) would carry that bias into the gradient.
template <typename T, int MR, int NR, bool X3 = false>
__device__ __forceinline__ void mm_points(float (&acc)[MR / 16][NR / 8][4], const T* A, const T* B,
                                          int r0, int lane) {
  if constexpr (X3) {
#pragma unroll
    for (int mt = 0; mt < MR / 16; ++mt) {
      float part[1][NR / 8][4] = {};
      mm_points_in<T, 16, NR, true>(part, A + 16 * mt * Geo<T>::kS, B, r0, lane);
#pragma unroll
      for (int nt = 0; nt < NR / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] += part[0][nt][e];
    }
  } else {
    mm_points_in<T, MR, NR, false>(acc, A, B, r0, lane);
  }
}

}  // namespace fno::cuda::detail
