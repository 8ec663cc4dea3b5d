// Fused forward and backward of an FNO block's pointwise tail (block_tail.h).
//
// Two families of kernels: the tensor-core kernels (namespace tc below) for
// bf16 and half activations and for fp32 ones (TF32 where it is allowed, else
// 3xTF32: fp32-level error); and the FFMA forward described here, fp32
// products on the CUDA cores (Fp32Math::kFfma, the fp32 default, whose
// backward is the 3xTF32 tensor-core kernel: block_tail.h says why).
//
// FFMA forward: one thread owns one grid point: its C-channel vectors live in
// registers and channel c is read at (b * C + c) * N + n, so a warp's loads of
// one channel are coalesced. Weights sit in shared memory as fp32 and are read
// with uniform (broadcast) 16-byte loads.
#include "block_tail.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace fno::cuda {
namespace {

// ---------------------------------------------------------------------------
// Element access (the FFMA forward runs fp32 only) and GELU
// ---------------------------------------------------------------------------
__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
// v rounded to T and back: what a stored-then-reloaded value is.
template <typename T>
__device__ __forceinline__ float round_to(float v);
template <>
__device__ __forceinline__ float round_to<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float round_to<__nv_bfloat16>(float v) {
  return __bfloat162float(__float2bfloat16(v));
}
template <>
__device__ __forceinline__ float round_to<__half>(float v) {
  return __half2float(__float2half(v));
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// GELU, in every kernel: torch::gelu's erf form with Phi(x) from Abramowitz &
// Stegun 7.1.26 (|error| <= 1.5e-7 in erf: a few fp32 ulps, far below the
// 2^-11 .. 2^-9 of the tensor-core products' operands; in the LibTorch path on
// the CPU it moved the 20-epoch Darcy seed's 16_l2 by 1e-5), which shares
// exp(-x^2 / 2) with GELU'(x) = Phi(x) + x phi(x): about half the
// instructions of erff + expf, which dominate these kernels.
// (rcp.approx and ex2.approx directly, -log2(e) / 2 and the 1/2 of
// P(N > |x|) = erfc(|x| / sqrt 2) / 2 folded into the constants: three
// instructions fewer than __fdividef, __expf and the extra products.)
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float phi_cdf(float x, float& e) {
  const float t = rcp_approx(fmaf(0.3275911f * kInvSqrt2, fabsf(x), 1.f));
  e = ex2_approx(x * (x * (-0.5f * 1.44269504088896341f)));  // exp(-x^2 / 2)
  float p = fmaf(t, 0.5f * 1.061405429f, 0.5f * -1.453152027f);
  p = fmaf(t, p, 0.5f * 1.421413741f);
  p = fmaf(t, p, 0.5f * -0.284496736f);
  p = fmaf(t, p, 0.5f * 0.254829592f);
  const float q = t * p * e;  // P(N > |x|)
  return x >= 0.f ? 1.f - q : q;
}
__device__ __forceinline__ float gelu_fast(float x) {
  float e;
  return x * phi_cdf(x, e);
}
__device__ __forceinline__ void gelu_and_grad_fast(float x, float& g, float& d) {
  float e;
  const float cdf = phi_cdf(x, e);
  g = x * cdf;
  d = fmaf(x * kInvSqrt2Pi, e, cdf);
}

// dot(row[0..K), v) with 16-byte loads of a shared-memory row (uniform address).
template <int K>
__device__ __forceinline__ float dot_row(const float* row, const float (&v)[K], float acc) {
  static_assert(K % 4 == 0, "rows are read as float4");
  const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int q = 0; q < K / 4; ++q) {
    const float4 w = r4[q];
    acc = fmaf(w.x, v[4 * q], acc);
    acc = fmaf(w.y, v[4 * q + 1], acc);
    acc = fmaf(w.z, v[4 * q + 2], acc);
    acc = fmaf(w.w, v[4 * q + 3], acc);
  }
  return acc;
}

template <int C, int CM>
struct Shape {
  static_assert(C % 4 == 0 && CM % 4 == 0, "channel counts must be multiples of 4");
  // The fp32 weights in shared memory.
  static constexpr int kWSkip = 0;
  static constexpr int kW1 = kWSkip + C * C;
  static constexpr int kB1 = kW1 + CM * C;
  static constexpr int kW2 = kB1 + CM;
  static constexpr int kB2 = kW2 + C * CM;
  static constexpr int kGate = kB2 + C;
  static constexpr int kWeights = ((kGate + C + 3) / 4) * 4;
  // The gradient entries, in the workspace's order: w_skip, w1, b1, w2, b2, gate.
  static constexpr int kEntries = C * C + CM * C + CM + C * CM + C + C;
};

// Loads the weights into shared memory (called by every thread, then a barrier).
template <int C, int CM>
__device__ void load_weights(float* sw, const BlockTailWeights& w) {
  using S = Shape<C, CM>;
  for (int i = threadIdx.x; i < C * C; i += blockDim.x) sw[S::kWSkip + i] = w.w_skip[i];
  for (int i = threadIdx.x; i < CM * C; i += blockDim.x) {
    sw[S::kW1 + i] = w.w1[i];
    sw[S::kW2 + i] = w.w2[i];
  }
  for (int i = threadIdx.x; i < CM; i += blockDim.x) sw[S::kB1 + i] = w.b1[i];
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    sw[S::kB2 + i] = w.b2[i];
    sw[S::kGate + i] = w.gate[i];
  }
}

// ---------------------------------------------------------------------------
// Forward: reads a, s; writes y1 and z.
// ---------------------------------------------------------------------------
constexpr int kFwdThreads = 256;

template <typename T, int C, int CM, bool kGeluMid>
__global__ void __launch_bounds__(kFwdThreads)
    forward_kernel(const T* __restrict__ a, const T* __restrict__ s, T* __restrict__ z,
                   T* __restrict__ y1, int64_t n, int64_t points, BlockTailWeights w) {
  using S = Shape<C, CM>;
  __shared__ __align__(16) float sw[S::kWeights];
  load_weights<C, CM>(sw, w);
  __syncthreads();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < points; p += stride) {
    // Keeps the compiler from hoisting the loop-invariant weight loads out of
    // the loop into (spilled) registers.
    asm volatile("" ::: "memory");
    const int64_t b = p / n;
    const int64_t base = b * C * n + (p - b * n);
    float av[C], y[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      av[c] = load(a + base + c * n);
      y[c] = load(s + base + c * n);
    }
    // y1 = W_skip a + s, stored; the rest reads y1 as stored (rounded to T),
    // as backward, which reloads it, does.
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const float v = dot_row<C>(sw + S::kWSkip + i * C, av, y[i]);
      store(y1 + base + i * n, v);
      y[i] = round_to<T>(v);
      if (kGeluMid) y[i] = gelu_fast(y[i]);
    }
    float gh[CM];
#pragma unroll
    for (int k = 0; k < CM; ++k)
      gh[k] = gelu_fast(dot_row<C>(sw + S::kW1 + k * C, y, sw[S::kB1 + k]));
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const float v = dot_row<CM>(sw + S::kW2 + i * CM, gh, sw[S::kB2 + i]);
      store(z + base + i * n, fmaf(sw[S::kGate + i], av[i], v));
    }
  }
}

// Sums the per-CTA partials over CTAs, in CTA order, into the gradients.
__global__ void reduce_partials_kernel(const float* __restrict__ partial, int ctas, int entries,
                                       int c, int cm, BlockTailGrads g) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  float acc = 0.f;
  for (int k = 0; k < ctas; ++k) acc += partial[int64_t{k} * entries + e];
  int r = e;
  if (r < c * c) {
    g.w_skip[r] = acc;
    return;
  }
  r -= c * c;
  if (r < cm * c) {
    g.w1[r] = acc;
    return;
  }
  r -= cm * c;
  if (r < cm) {
    g.b1[r] = acc;
    return;
  }
  r -= cm;
  if (r < c * cm) {
    g.w2[r] = acc;
    return;
  }
  r -= c * cm;
  if (r < c) {
    g.b2[r] = acc;
    return;
  }
  g.gate[r - c] = acc;
}

// ===========================================================================
// Tensor-core kernels (mma.sync): bf16 and half activations, and fp32
// activations, on TF32 when the caller allows it, else in 3xTF32 (each operand
// split into two TF32 parts, three MMAs a product; X3 below).
//
// Each warp works on its own tiles of kWP consecutive grid points of one batch
// entry (64 bytes of each channel row), staged in shared memory as [channel]
// [point] rows (cp.async, double buffered: the next tile loads while this one
// computes). A tile of 16 points is a [16 x C] matrix: the per-point channel
// products are m16n8k16 (bf16/half) or m16n8k8 (TF32) MMAs with the weights
// as the B operand (fragments built once per CTA in shared memory, rounded to
// the activation type as the LibTorch path casts its weights), fp32
// accumulators. An accumulator's layout (rows g, g+8; columns 2t, 2t+1) is
// the next product's A fragment, so the chain stays in registers. The weight
// gradients [C x 16 points] x [16 points x C] run on the same MMAs from the
// staged rows; each warp keeps its fp32 accumulators for all its tiles, and
// the CTA adds its warps in order before the fixed-order reduction over CTAs.
// 16-bit per-point values move between the staged rows and the accumulator
// layout with ldmatrix / stmatrix .trans; the forward writes a group's y1 and z
// in place of its a and s; the bf16/half backward keeps each per-point operand
// in one packed form (kPacked). The cp.async copies carry an L2 prefetch hint
// and the forward runs fewer CTAs than fit (BlockTailTuning: measured faster).
// ===========================================================================
namespace tc {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

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

// Tile geometry for activations of type T: kWP points per warp tile (64-byte
// rows), row stride kS elements (80 bytes: the fragment and per-point accesses
// below are bank-conflict free, rows stay 16-byte aligned).
template <typename T>
struct Geo {
  static constexpr int kWP = 64 / sizeof(T);
  static constexpr int kS = 80 / sizeof(T);
  static constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte chunk
};

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ void from_f(float& d, float v) { d = v; }

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// A packed pair of 16-bit values (low half first) as floats.
__device__ __forceinline__ void unpack(uint32_t r, float& lo, float& hi, __nv_bfloat16*) {
  lo = __uint_as_float(r << 16);
  hi = __uint_as_float(r & 0xffff0000u);
}
__device__ __forceinline__ void unpack(uint32_t r, float& lo, float& hi, __half*) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
  lo = f.x;
  hi = f.y;
}

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

// A 16-byte cp.async with an L2 prefetch hint of kL2 bytes (0, 64, 128, 256).
template <int kL2>
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (kL2 == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s), "l"(gmem)
                 : "memory");
  } else if constexpr (kL2 == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(s), "l"(gmem)
                 : "memory");
  } else if constexpr (kL2 == 64) {
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16;" ::"r"(s), "l"(gmem)
                 : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// One warp tile: kWP points from n0 of batch entry b (count of them in range).
struct TileRef {
  int64_t base;  // element offset of (b, channel 0, n0)
  int count;
  bool vec;  // whole and 16-byte aligned: vector copies
};
// A warp's tiles tile, tile + step, ...: the batch entry b and the tile t
// within it carried along (divisions once, at the start: not per tile).
struct TileWalk {
  int64_t b, t, db, dt, tpb;
  __device__ TileWalk(int64_t tile, int64_t step, int64_t tiles_per_batch)
      : b(tile / tiles_per_batch),
        t(tile % tiles_per_batch),
        db(step / tiles_per_batch),
        dt(step % tiles_per_batch),
        tpb(tiles_per_batch) {}
  __device__ void next() {
    b += db;
    t += dt;
    if (t >= tpb) {
      t -= tpb;
      ++b;
    }
  }
};
template <typename T>
__device__ __forceinline__ TileRef tile_ref(const TileWalk& w, int64_t n, int channels,
                                            bool vec_ok) {
  constexpr int WP = Geo<T>::kWP;
  const int64_t n0 = w.t * WP;
  const int count = n - n0 < WP ? static_cast<int>(n - n0) : WP;
  return {w.b * channels * n + n0, count, vec_ok && count == WP};
}

// A lane's 16-byte chunks of a whole tile's rows [R][kWP]: rows row0,
// row0 + kStep, ... at column col (a warp covers kStep rows a step).
template <typename T, int R>
struct TileChunks {
  static constexpr int kCpr = Geo<T>::kWP / Geo<T>::kVec;  // chunks per row
  static constexpr int kStep = 32 / kCpr;
  static constexpr int kIters = R / kStep;
  static_assert(32 % kCpr == 0 && R % kStep == 0, "whole chunks per lane");
};
template <typename T, int R, int kL2>
__device__ __forceinline__ void tile_in_vec(T* dst, const T* __restrict__ g, int64_t n, int lane) {
  using K = TileChunks<T, R>;
  const int row0 = lane / K::kCpr, col = (lane % K::kCpr) * Geo<T>::kVec;
  const T* gp = g + row0 * n + col;
  const int64_t gstep = K::kStep * n;
#pragma unroll
  for (int it = 0; it < K::kIters; ++it, gp += gstep)
    cp_async16<kL2>(dst + (row0 + it * K::kStep) * Geo<T>::kS + col, gp);
}

// Copies rows [R][kWP] of a tile from global memory into staged rows (points
// past count read as zero); l2pf: the L2 prefetch size hinted with the copies,
// 0, 64, 128 or 256 bytes (warp-uniform, see BlockTailTuning).
template <typename T, int R>
__device__ __forceinline__ void tile_in(T* dst, const T* __restrict__ src, const TileRef& r,
                                        int64_t n, int lane, int l2pf) {
  constexpr int WP = Geo<T>::kWP, S = Geo<T>::kS;
  const T* g = src + r.base;
  if (r.vec) {
    switch (l2pf) {
      case 256:
        tile_in_vec<T, R, 256>(dst, g, n, lane);
        break;
      case 128:
        tile_in_vec<T, R, 128>(dst, g, n, lane);
        break;
      case 64:
        tile_in_vec<T, R, 64>(dst, g, n, lane);
        break;
      default:
        tile_in_vec<T, R, 0>(dst, g, n, lane);
    }
  } else {
    for (int i = lane; i < R * WP; i += 32) {
      const int row = i / WP, col = i % WP;
      dst[row * S + col] = col < r.count ? g[row * n + col] : T(0.f);
    }
  }
}
template <typename T, int R>
__device__ __forceinline__ void tile_out(T* __restrict__ dst, const T* src, const TileRef& r,
                                         int64_t n, int lane) {
  constexpr int WP = Geo<T>::kWP, S = Geo<T>::kS;
  T* g = dst + r.base;
  if (r.vec) {
    using K = TileChunks<T, R>;
    const int row0 = lane / K::kCpr, col = (lane % K::kCpr) * Geo<T>::kVec;
    T* gp = g + row0 * n + col;
    const int64_t gstep = K::kStep * n;
    // Every chunk read before the first store (the compiler cannot move a
    // shared-memory read above a global store it might alias).
    uint4 v[K::kIters];
#pragma unroll
    for (int it = 0; it < K::kIters; ++it)
      v[it] = *reinterpret_cast<const uint4*>(src + (row0 + it * K::kStep) * S + col);
#pragma unroll
    for (int it = 0; it < K::kIters; ++it, gp += gstep)
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(gp), "r"(v[it].x), "r"(v[it].y),
                   "r"(v[it].z), "r"(v[it].w)
                   : "memory");
  } else {
    for (int i = lane; i < R * WP; i += 32) {
      const int row = i / WP, col = i % WP;
      if (col < r.count) g[row * n + col] = src[row * S + col];
    }
  }
}

// ---------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------
template <typename T, int C, int CM, bool X3 = false>
struct FwdSmem {
  static constexpr int kRows = C * Geo<T>::kS;  // elements of one staged [C] tile
  // per warp: a[2], s[2] (a group's y1 and z replace its a and s in place)
  static constexpr int kWarpElems = 4 * kRows;
  static constexpr int kWSkip = 0;                                 // B(j, i) = W_skip[i][j]
  static constexpr int kW1 = kWSkip + BFrag<T, C, C, X3>::kWords;  // B(i, k) = W1[k][i]
  static constexpr int kW2 = kW1 + BFrag<T, C, CM, X3>::kWords;    // B(k, i) = W2[i][k]
  static constexpr int kWords = kW2 + BFrag<T, CM, C, X3>::kWords;
  static constexpr size_t kTileBytes = sizeof(T) * kWarps * kWarpElems;
  // then b1 [CM], b2 [C], gate [C] in fp32
  static constexpr size_t kBytes = kTileBytes + 4 * kWords + 4 * (CM + 2 * C);
  static_assert(kTileBytes % 16 == 0, "B fragments are read with 16-byte loads");
};

template <typename T, int C, int CM, bool kGeluMid, bool X3>
__global__ void __launch_bounds__(kThreads)
    forward_tc(const T* __restrict__ a, const T* __restrict__ s, T* __restrict__ z,
               T* __restrict__ y1, int64_t n, int64_t tiles_per_batch, int64_t tiles, bool vec_ok,
               int l2pf, BlockTailWeights w) {
  using L = FwdSmem<T, C, CM, X3>;
  constexpr int R = L::kRows;
  extern __shared__ float4 smem4[];
  T* tiles_sm = reinterpret_cast<T*>(smem4);
  uint32_t* fr = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(smem4) + L::kTileBytes);
  float* sb1 = reinterpret_cast<float*>(fr + L::kWords);
  float* sb2 = sb1 + CM;
  float* sgate = sb2 + C;
  build_bfrag<T, C, C, X3>(fr + L::kWSkip, [&](int k, int nn) { return w.w_skip[nn * C + k]; });
  build_bfrag<T, C, CM, X3>(fr + L::kW1, [&](int k, int nn) { return w.w1[nn * C + k]; });
  build_bfrag<T, CM, C, X3>(fr + L::kW2, [&](int k, int nn) { return w.w2[nn * CM + k]; });
  for (int i = threadIdx.x; i < CM; i += blockDim.x) sb1[i] = w.b1[i];
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    sb2[i] = w.b2[i];
    sgate[i] = w.gate[i];
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* ws = tiles_sm + warp * L::kWarpElems;
  // (stage st of the inputs: a at ws + st * R, s at ws + (2 + st) * R)
  const auto s_a = [&](int st) { return ws + st * R; };
  const auto s_s = [&](int st) { return ws + (2 + st) * R; };
  const int64_t nw = int64_t{gridDim.x} * kWarps;
  int64_t tile = int64_t{blockIdx.x} * kWarps + warp;
  TileWalk walk(tile, nw, tiles_per_batch);
  if (tile < tiles) {
    const TileRef r = tile_ref<T>(walk, n, C, vec_ok);
    tile_in<T, C>(s_a(0), a, r, n, lane, l2pf);
    tile_in<T, C>(s_s(0), s, r, n, lane, l2pf);
  }
  cp_async_commit();
  for (int st = 0; tile < tiles; tile += nw, st ^= 1) {
    const TileRef r = tile_ref<T>(walk, n, C, vec_ok);
    walk.next();
    if (tile + nw < tiles) {
      const TileRef rn = tile_ref<T>(walk, n, C, vec_ok);
      tile_in<T, C>(s_a(st ^ 1), a, rn, n, lane, l2pf);
      tile_in<T, C>(s_s(st ^ 1), s, rn, n, lane, l2pf);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
#pragma unroll
    for (int r0 = 0; r0 < Geo<T>::kWP; r0 += 16) {
      float av[C / 8][4], y[C / 8][4];
      load_acc<T, C>(s_a(st), r0, lane, av);
      load_acc<T, C>(s_s(st), r0, lane, y);
      mm<T, C, C, X3>(y, av, fr + L::kWSkip, lane);  // y1 = W_skip a + s
      store_acc<T, C>(s_a(st), r0, lane, y);         // (in place of a)
      // The rest reads y1 as stored (rounded to T), as backward, which reloads it, does.
#pragma unroll
      for (int j = 0; j < C / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          y[j][e] = round_to<T>(y[j][e]);
          if (kGeluMid) y[j][e] = gelu_fast(y[j][e]);
        }
      float h[CM / 8][4];
      fill_cols<CM>(sb1, lane, h);
      mm<T, C, CM, X3>(h, y, fr + L::kW1, lane);
#pragma unroll
      for (int j = 0; j < CM / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) h[j][e] = gelu_fast(h[j][e]);
      float zv[C / 8][4];
      fill_cols<C>(sgate, lane, zv);
      float b2v[C / 8][4];
      fill_cols<C>(sb2, lane, b2v);
#pragma unroll
      for (int j = 0; j < C / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) zv[j][e] = fmaf(zv[j][e], av[j][e], b2v[j][e]);
      mm<T, CM, C, X3>(zv, h, fr + L::kW2, lane);
      store_acc<T, C>(s_s(st), r0, lane, zv);  // (in place of s)
    }
    __syncwarp();
    tile_out<T, C>(y1, s_a(st), r, n, lane);
    tile_out<T, C>(z, s_s(st), r, n, lane);
    __syncwarp();
  }
  cp_async_wait<0>();
}

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------
template <typename T, int C, int CM, bool X3 = false>
struct BwdSmem {
  static constexpr int kRows = C * Geo<T>::kS;
  static constexpr int kRowsM = CM * Geo<T>::kS;
  // per warp: in[2], y1[2], dz[2], dy, da ([C] rows each), gh, dh ([CM] rows)
  static constexpr int kWarpElems = 8 * kRows + 2 * kRowsM;
  static constexpr int kW1 = 0;                                      // B(i, k) = W1[k][i]
  static constexpr int kW2 = kW1 + BFrag<T, C, CM, X3>::kWords;      // B(i, k) = W2[i][k]
  static constexpr int kW1n = kW2 + BFrag<T, C, CM, X3>::kWords;     // B(k, i) = W1[k][i]
  static constexpr int kWSkip = kW1n + BFrag<T, CM, C, X3>::kWords;  // B(i, j) = W_skip[i][j]
  static constexpr int kWords = kWSkip + BFrag<T, C, C, X3>::kWords;
  static constexpr size_t kTileBytes = sizeof(T) * kWarps * kWarpElems;
  static constexpr size_t kBytes = kTileBytes + 4 * kWords + 4 * (CM + 2 * C);
  static_assert(kTileBytes % 16 == 0, "B fragments are read with 16-byte loads");
  static_assert(kTileBytes >= sizeof(float) * kWarps * Shape<C, CM>::kEntries,
                "the CTA's reduction reuses the tiles");
};

template <typename T, int C, int CM, bool kGeluIn, bool kGeluMid, bool X3, bool kPacked>
__global__ void __launch_bounds__(kThreads, 2)
    backward_tc(const T* __restrict__ dz, const T* __restrict__ in, const T* __restrict__ y1,
                T* __restrict__ da, T* __restrict__ ds, int64_t n, int64_t tiles_per_batch,
                int64_t tiles, bool vec_ok, int l2pf, BlockTailWeights w,
                float* __restrict__ partial) {
  using L = BwdSmem<T, C, CM, X3>;
  using S = Shape<C, CM>;
  constexpr int R = L::kRows, RM = L::kRowsM;
  extern __shared__ float4 smem4[];
  T* tiles_sm = reinterpret_cast<T*>(smem4);
  uint32_t* fr = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(smem4) + L::kTileBytes);
  float* sb1 = reinterpret_cast<float*>(fr + L::kWords);
  float* sgate = sb1 + CM;
  build_bfrag<T, C, CM, X3>(fr + L::kW1, [&](int k, int nn) { return w.w1[nn * C + k]; });
  build_bfrag<T, C, CM, X3>(fr + L::kW2, [&](int k, int nn) { return w.w2[k * CM + nn]; });
  build_bfrag<T, CM, C, X3>(fr + L::kW1n, [&](int k, int nn) { return w.w1[k * C + nn]; });
  build_bfrag<T, C, C, X3>(fr + L::kWSkip, [&](int k, int nn) { return w.w_skip[k * C + nn]; });
  for (int i = threadIdx.x; i < CM; i += blockDim.x) sb1[i] = w.b1[i];
  for (int i = threadIdx.x; i < C; i += blockDim.x) sgate[i] = w.gate[i];
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* ws = tiles_sm + warp * L::kWarpElems;
  // (stage st of the inputs: in, y1, dz at ws + (0, 2, 4 + st) * R)
  const auto s_in = [&](int st) { return ws + st * R; };
  const auto s_y1 = [&](int st) { return ws + (2 + st) * R; };
  const auto s_dz = [&](int st) { return ws + (4 + st) * R; };
  T* s_dy = ws + 6 * R;
  T* s_da = ws + 7 * R;
  T* s_gh = ws + 8 * R;
  T* s_dh = s_gh + RM;

  float acc_s[C / 16][C / 8][4] = {};   // dW_skip[i][j] = sum dy1_i a_j
  float acc_1[CM / 16][C / 8][4] = {};  // dW1[k][i] = sum dh_k act(y1)_i
  float acc_2[C / 16][CM / 8][4] = {};  // dW2[i][k] = sum dz_i GELU(h)_k
  float acc_b2[C / 8][2] = {}, acc_gate[C / 8][2] = {}, acc_b1[CM / 8][2] = {};
  // The steps both forms below share. b1's gradient: the sum of dh (as rounded).
  const auto add_b1 = [&](const float(&dh)[CM / 8][4]) {
#pragma unroll
    for (int j = 0; j < CM / 8; ++j) {
      acc_b1[j][0] += dh[j][0] + dh[j][2];
      acc_b1[j][1] += dh[j][1] + dh[j][3];
    }
  };
  // da's start, gate * dz; b2's and the gate's gradients: sums of dz and dz * a.
  const auto start_da = [&](const float(&dzv)[C / 8][4], const float(&av)[C / 8][4],
                            float(&dav)[C / 8][4]) {
    fill_cols<C>(sgate, lane, dav);
#pragma unroll
    for (int j = 0; j < C / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dav[j][e] *= dzv[j][e];
      acc_b2[j][0] += dzv[j][0] + dzv[j][2];
      acc_b2[j][1] += dzv[j][1] + dzv[j][3];
      acc_gate[j][0] = fmaf(dzv[j][0], av[j][0], fmaf(dzv[j][2], av[j][2], acc_gate[j][0]));
      acc_gate[j][1] = fmaf(dzv[j][1], av[j][1], fmaf(dzv[j][3], av[j][3], acc_gate[j][1]));
    }
  };

  const int64_t nw = int64_t{gridDim.x} * kWarps;
  int64_t tile = int64_t{blockIdx.x} * kWarps + warp;
  TileWalk walk(tile, nw, tiles_per_batch);
  if (tile < tiles) {
    const TileRef r = tile_ref<T>(walk, n, C, vec_ok);
    tile_in<T, C>(s_in(0), in, r, n, lane, l2pf);
    tile_in<T, C>(s_y1(0), y1, r, n, lane, l2pf);
    tile_in<T, C>(s_dz(0), dz, r, n, lane, l2pf);
  }
  cp_async_commit();
  for (int st = 0; tile < tiles; tile += nw, st ^= 1) {
    const TileRef r = tile_ref<T>(walk, n, C, vec_ok);
    walk.next();
    if (tile + nw < tiles) {
      const TileRef rn = tile_ref<T>(walk, n, C, vec_ok);
      tile_in<T, C>(s_in(st ^ 1), in, rn, n, lane, l2pf);
      tile_in<T, C>(s_y1(st ^ 1), y1, rn, n, lane, l2pf);
      tile_in<T, C>(s_dz(st ^ 1), dz, rn, n, lane, l2pf);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
    T* const s_a = s_in(st);   // a, in place of x when gelu_input
    T* const s_g1 = s_y1(st);  // act(y1), in place of y1
    const T* const s_dzc = s_dz(st);
    // The weight gradients over the 16 points r0.. of this tile.
    const auto add_wgrads = [&](int r0) {
      mm_points<T, C, C, X3>(acc_s, s_dy, s_a, r0, lane);
      mm_points<T, CM, C, X3>(acc_1, s_dh, s_g1, r0, lane);
      mm_points<T, C, CM, X3>(acc_2, s_dzc, s_gh, r0, lane);
    };
#pragma unroll 1
    for (int r0 = 0; r0 < Geo<T>::kWP; r0 += 16) {
      if constexpr (kPacked) {
        // bf16/half: the same maths as below (bit for bit), each per-point
        // operand rounded to T and packed once, for its product and its store.
        float av[C / 8][4], dzv[C / 8][4], d1[C / 8][4];
        uint32_t pa[C / 8][2], pdz[C / 8][2], pg[C / 8][2];
        ldsm_packed<T, C>(s_a, r0, lane, pa);
        unpack_acc<T, C>(pa, av);
        if (kGeluIn) {
#pragma unroll
          for (int j = 0; j < C / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) av[j][e] = gelu_fast(av[j][e]);
          pack_acc<T, C>(av, pa);
          stsm_packed<T, C>(s_a, r0, lane, pa);
          unpack_acc<T, C>(pa, av);  // a as rounded, for the gate's gradient
        }
        ldsm_packed<T, C>(s_dzc, r0, lane, pdz);
        unpack_acc<T, C>(pdz, dzv);
        ldsm_packed<T, C>(s_g1, r0, lane, pg);
        if (kGeluMid) {
          float g1[C / 8][4];
          unpack_acc<T, C>(pg, g1);
#pragma unroll
          for (int j = 0; j < C / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) gelu_and_grad_fast(g1[j][e], g1[j][e], d1[j][e]);
          pack_acc<T, C>(g1, pg);
          stsm_packed<T, C>(s_g1, r0, lane, pg);
        }
        float h[CM / 8][4], dh[CM / 8][4] = {};
        fill_cols<CM>(sb1, lane, h);
        mm_packed<T, C, CM>(h, pg, fr + L::kW1, lane);
        mm_packed<T, C, CM>(dh, pdz, fr + L::kW2, lane);
#pragma unroll
        for (int j = 0; j < CM / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float gh, dgh;
            gelu_and_grad_fast(h[j][e], gh, dgh);
            h[j][e] = gh;
            dh[j][e] *= dgh;
          }
        uint32_t pgh[CM / 8][2], pdh[CM / 8][2];
        pack_acc<T, CM>(h, pgh);
        stsm_packed<T, CM>(s_gh, r0, lane, pgh);
        pack_acc<T, CM>(dh, pdh);
        stsm_packed<T, CM>(s_dh, r0, lane, pdh);
        unpack_acc<T, CM>(pdh, dh);  // dh as rounded, for b1's gradient
        add_b1(dh);
        float dy[C / 8][4] = {};
        mm_packed<T, CM, C>(dy, pdh, fr + L::kW1n, lane);
        if (kGeluMid) {
#pragma unroll
          for (int j = 0; j < C / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) dy[j][e] *= d1[j][e];
        }
        uint32_t pdy[C / 8][2];
        pack_acc<T, C>(dy, pdy);
        stsm_packed<T, C>(s_dy, r0, lane, pdy);
        float dav[C / 8][4];
        start_da(dzv, av, dav);
        mm_packed<T, C, C>(dav, pdy, fr + L::kWSkip, lane);
        store_acc<T, C>(s_da, r0, lane, dav);
        __syncwarp();
        add_wgrads(r0);
        __syncwarp();
        continue;
      }
      // Points past the end read zeros: with dz = 0 they add nothing to any gradient.
      float av[C / 8][4], dzv[C / 8][4], g1[C / 8][4], d1[C / 8][4];
      load_acc<T, C>(s_a, r0, lane, av);
      if (kGeluIn) {
#pragma unroll
        for (int j = 0; j < C / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) av[j][e] = round_to<T>(gelu_fast(av[j][e]));
        store_acc<T, C>(s_a, r0, lane, av);
      }
      load_acc<T, C>(s_dzc, r0, lane, dzv);
      load_acc<T, C>(s_g1, r0, lane, g1);
      if (kGeluMid) {
#pragma unroll
        for (int j = 0; j < C / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            gelu_and_grad_fast(g1[j][e], g1[j][e], d1[j][e]);
            g1[j][e] = round_to<T>(g1[j][e]);
          }
        store_acc<T, C>(s_g1, r0, lane, g1);
      }
      // Hidden layer h = W1 g1 + b1, recomputed; dh = GELU'(h) * W2^T dz.
      float h[CM / 8][4], dh[CM / 8][4] = {};
      fill_cols<CM>(sb1, lane, h);
      mm<T, C, CM, X3>(h, g1, fr + L::kW1, lane);
      mm<T, C, CM, X3>(dh, dzv, fr + L::kW2, lane);
#pragma unroll
      for (int j = 0; j < CM / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float gh, dgh;
          gelu_and_grad_fast(h[j][e], gh, dgh);
          h[j][e] = gh;
          dh[j][e] = round_to<T>(dh[j][e] * dgh);
        }
      store_acc<T, CM>(s_gh, r0, lane, h);
      store_acc<T, CM>(s_dh, r0, lane, dh);
      add_b1(dh);
      // dy1 = act'(y1) * W1^T dh: the spectral output's gradient ds too.
      float dy[C / 8][4] = {};
      mm<T, CM, C, X3>(dy, dh, fr + L::kW1n, lane);
#pragma unroll
      for (int j = 0; j < C / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kGeluMid) dy[j][e] *= d1[j][e];
          dy[j][e] = round_to<T>(dy[j][e]);
        }
      store_acc<T, C>(s_dy, r0, lane, dy);
      // da = W_skip^T dy1 + gate * dz
      float dav[C / 8][4];
      start_da(dzv, av, dav);
      mm<T, C, C, X3>(dav, dy, fr + L::kWSkip, lane);
      store_acc<T, C>(s_da, r0, lane, dav);
      __syncwarp();
      add_wgrads(r0);
      __syncwarp();
    }
    tile_out<T, C>(ds, s_dy, r, n, lane);
    tile_out<T, C>(da, s_da, r, n, lane);
    __syncwarp();
  }
  cp_async_wait<0>();

  // The vector gradients: sum over the lanes' rows (g), a fixed tree.
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
  float* red = reinterpret_cast<float*>(smem4);
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

}  // namespace tc

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------
BlockTailTuning tuning_from_env() {
  BlockTailTuning t;
  const auto get = [](const char* name, int& v) {
    if (const char* e = std::getenv(name)) v = std::atoi(e);
  };
  get("FNO_BLOCK_TAIL_FWD_CTAS", t.forward_ctas_per_sm);
  get("FNO_BLOCK_TAIL_BWD_CTAS", t.backward_ctas_per_sm);
  get("FNO_BLOCK_TAIL_L2_PREFETCH", t.l2_prefetch);
  int packed = t.packed ? 1 : 0;
  get("FNO_BLOCK_TAIL_PACKED", packed);
  t.packed = packed != 0;
  return t;
}
BlockTailTuning g_tuning = tuning_from_env();

int device_sms() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return std::max(sms, 1);
}

// A persistent grid: at most `per_sm` CTAs per multiprocessor, fewer on small inputs.
int64_t blocks_for(int64_t points, int threads, int per_sm) {
  const int64_t needed = (points + threads - 1) / threads;
  return std::max<int64_t>(1, std::min<int64_t>(needed, int64_t{device_sms()} * per_sm));
}

template <typename T, int C, int CM>
struct Forward {
  static int run(const void* a, const void* s, void* z, void* y1, int64_t batch, int64_t n,
                 const BlockTailWeights& w, bool gelu_mid, cudaStream_t stream) {
    const int64_t points = batch * n;
    if (points == 0) return cudaSuccess;
    auto kernel = gelu_mid ? forward_kernel<T, C, CM, true> : forward_kernel<T, C, CM, false>;
    static const int per_sm[2] = {occupancy(forward_kernel<T, C, CM, false>),
                                  occupancy(forward_kernel<T, C, CM, true>)};
    const auto blocks = blocks_for(points, kFwdThreads, per_sm[gelu_mid]);
    kernel<<<static_cast<unsigned>(blocks), kFwdThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(s), static_cast<T*>(z), static_cast<T*>(y1),
        n, points, w);
    return cudaGetLastError();
  }
  template <typename K>
  static int occupancy(K kernel) {
    int blocks = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kFwdThreads, 0);
    return std::max(blocks, 1);
  }
};

// ---------------------------------------------------------------------------
// Tensor-core launchers
// ---------------------------------------------------------------------------
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
int64_t tc_tiles_per_batch(int64_t n) {
  return (n + tc::Geo<T>::kWP - 1) / tc::Geo<T>::kWP;
}

// The backward's CTAs: two per multiprocessor (shared memory), fewer on small
// inputs (or where BlockTailTuning caps them).
constexpr int kTcBackwardPerSm = 2;
template <typename T>
int64_t tc_backward_blocks(int64_t batch, int64_t n, int per_sm = kTcBackwardPerSm) {
  const int64_t tiles = batch * tc_tiles_per_batch<T>(n);
  return std::max<int64_t>(
      1, std::min<int64_t>((tiles + tc::kWarps - 1) / tc::kWarps, int64_t{device_sms()} * per_sm));
}

template <typename T, int C, int CM, bool X3>
struct ForwardTcT {
  using L = tc::FwdSmem<T, C, CM, X3>;
  template <bool kGeluMid>
  static int occupancy() {
    static const int per_sm = [] {
      auto kernel = tc::forward_tc<T, C, CM, kGeluMid, X3>;
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(L::kBytes)) != cudaSuccess)
        return 0;
      int blocks = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, tc::kThreads, L::kBytes);
      return std::max(blocks, 1);
    }();
    return per_sm;
  }
  static int run(const void* a, const void* s, void* z, void* y1, int64_t batch, int64_t n,
                 const BlockTailWeights& w, bool gelu_mid, cudaStream_t stream) {
    const int64_t tpb = tc_tiles_per_batch<T>(n), tiles = batch * tpb;
    if (tiles == 0) return cudaSuccess;
    int per_sm = gelu_mid ? occupancy<true>() : occupancy<false>();
    if (per_sm == 0) return cudaErrorInvalidConfiguration;
    // Fewer CTAs than fit measure faster (H100, with the L2 prefetch: fp32
    // 1.70 ms at 2 a multiprocessor against 1.88-1.93 at 3-6; bf16 0.88 ms
    // at 3 against 0.94-0.98 at 2 or 4-6): 2 for 4-byte, 3 for 2-byte types.
    const int cap =
        g_tuning.forward_ctas_per_sm > 0 ? g_tuning.forward_ctas_per_sm : (sizeof(T) == 4 ? 2 : 3);
    per_sm = std::min(per_sm, cap);
    const int64_t blocks = std::max<int64_t>(
        1,
        std::min<int64_t>((tiles + tc::kWarps - 1) / tc::kWarps, int64_t{device_sms()} * per_sm));
    const bool vec =
        n % tc::Geo<T>::kVec == 0 && aligned16(a) && aligned16(s) && aligned16(z) && aligned16(y1);
    auto kernel =
        gelu_mid ? tc::forward_tc<T, C, CM, true, X3> : tc::forward_tc<T, C, CM, false, X3>;
    kernel<<<static_cast<unsigned>(blocks), tc::kThreads, L::kBytes, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(s), static_cast<T*>(z), static_cast<T*>(y1),
        n, tpb, tiles, vec, g_tuning.l2_prefetch, w);
    return cudaGetLastError();
  }
};

template <typename T, int C, int CM, bool X3>
struct BackwardTcT {
  using L = tc::BwdSmem<T, C, CM, X3>;
  template <bool kGeluIn, bool kGeluMid>
  static int launch(const void* dz, const void* in, const void* y1, void* da, void* ds, int64_t n,
                    int64_t tpb, int64_t tiles, bool vec, int blocks, const BlockTailWeights& w,
                    float* workspace, cudaStream_t stream) {
    auto kernel = tc::backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, false>;
    if constexpr (sizeof(T) == 2) {
      if (g_tuning.packed) kernel = tc::backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, true>;
    }
    static const cudaError_t attr[2] = {
        cudaFuncSetAttribute(tc::backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(L::kBytes)),
        sizeof(T) == 2
            ? cudaFuncSetAttribute(tc::backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, sizeof(T) == 2>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(L::kBytes))
            : cudaSuccess};
    if (attr[0] != cudaSuccess) return attr[0];
    if (attr[1] != cudaSuccess) return attr[1];
    kernel<<<blocks, tc::kThreads, L::kBytes, stream>>>(
        static_cast<const T*>(dz), static_cast<const T*>(in), static_cast<const T*>(y1),
        static_cast<T*>(da), static_cast<T*>(ds), n, tpb, tiles, vec, g_tuning.l2_prefetch, w,
        workspace);
    return cudaGetLastError();
  }

  static int run(const void* dz, const void* in, const void* y1, void* da, void* ds, int64_t batch,
                 int64_t n, const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                 bool gelu_mid, float* workspace, cudaStream_t stream) {
    const int64_t tpb = tc_tiles_per_batch<T>(n), tiles = batch * tpb;
    constexpr int entries = Shape<C, CM>::kEntries;
    const int cap = g_tuning.backward_ctas_per_sm;
    const int blocks = static_cast<int>(tc_backward_blocks<T>(
        batch, n, cap > 0 ? std::min(cap, kTcBackwardPerSm) : kTcBackwardPerSm));
    if (tiles > 0) {
      const bool vec = n % tc::Geo<T>::kVec == 0 && aligned16(dz) && aligned16(in) &&
                       aligned16(y1) && aligned16(da) && aligned16(ds);
      const auto f = gelu_input ? (gelu_mid ? &launch<true, true> : &launch<true, false>)
                                : (gelu_mid ? &launch<false, true> : &launch<false, false>);
      if (const int err = f(dz, in, y1, da, ds, n, tpb, tiles, vec, blocks, w, workspace, stream))
        return err;
    } else {
      cudaMemsetAsync(workspace, 0, sizeof(float) * entries, stream);
    }
    reduce_partials_kernel<<<(entries + 255) / 256, 256, 0, stream>>>(
        workspace, tiles > 0 ? blocks : 1, entries, C, CM, g);
    return cudaGetLastError();
  }
};

// TF32 (bf16/half: their own MMAs), and 3xTF32 for fp32 where TF32 is not allowed.
template <typename T, int C, int CM>
using ForwardTc = ForwardTcT<T, C, CM, false>;
template <typename T, int C, int CM>
using BackwardTc = BackwardTcT<T, C, CM, false>;
template <typename T, int C, int CM>
using ForwardTc3 = ForwardTcT<T, C, CM, true>;
template <typename T, int C, int CM>
using BackwardTc3 = BackwardTcT<T, C, CM, true>;

// Op<T, C, CM>::run(args...) for the run-time dtype and shape. Only the seed
// model's width is compiled (C = 32, Cmid = 16): the kernels are written for
// any multiple of 4 (within the backward's shared memory), but a wider
// instantiation spills its per-point registers and takes ptxas minutes; other
// shapes run the LibTorch path.
template <template <typename, int, int> class Op, typename T, typename... Args>
int by_shape(int64_t channels, int64_t mid, Args&&... args) {
  if (channels == 32 && mid == 16) return Op<T, 32, 16>::run(std::forward<Args>(args)...);
  return cudaErrorInvalidValue;
}

// fp32 activations run the tensor-core kernels in TF32 where the caller allows
// it, else in 3xTF32 (fp32-level error) or (Fp32Math::kFfma) on the FFMA forward; bf16
// and half always run the tensor-core kernels.
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

}  // namespace

bool block_tail_supported(int64_t channels, int64_t mid) { return channels == 32 && mid == 16; }

void set_block_tail_tuning(const BlockTailTuning& tuning) { g_tuning = tuning; }
BlockTailTuning block_tail_tuning() { return g_tuning; }

int block_tail_forward(Dtype dtype, const void* a, const void* s, void* z, void* y1, int64_t batch,
                       int64_t channels, int64_t mid, int64_t n, const BlockTailWeights& w,
                       bool gelu_mid, void* stream, Fp32Math fp32) {
  return dispatch<Forward, ForwardTc, ForwardTc3>(dtype, fp32, channels, mid, a, s, z, y1, batch, n,
                                                  w, gelu_mid, static_cast<cudaStream_t>(stream));
}

int64_t block_tail_backward_workspace(int64_t batch, int64_t channels, int64_t mid, int64_t n) {
  if (channels == 32 && mid == 16) {
    // Enough for every dtype (fp32 tiles are the narrowest: the most CTAs).
    const int64_t blocks =
        std::max(tc_backward_blocks<float>(batch, n), tc_backward_blocks<__nv_bfloat16>(batch, n));
    return Shape<32, 16>::kEntries * blocks;
  }
  return 0;
}

int block_tail_backward(Dtype dtype, const void* dz, const void* in, const void* y1, void* da,
                        void* ds, int64_t batch, int64_t channels, int64_t mid, int64_t n,
                        const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                        bool gelu_mid, float* workspace, void* stream, Fp32Math fp32) {
  // Fp32Math::kFfma's backward is 3xTF32 (block_tail.h).
  return dispatch<BackwardTc3, BackwardTc, BackwardTc3>(
      dtype, fp32, channels, mid, dz, in, y1, da, ds, batch, n, w, g, gelu_input, gelu_mid,
      workspace, static_cast<cudaStream_t>(stream));
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace fno::cuda
