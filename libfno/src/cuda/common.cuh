// What every block-tail kernel (block_tail.h) builds on: rounding to and
// converting from the activation types, the weight and weight-gradient layout
// (Shape), and the tensor-core kernels' warp count and tile geometry, with
// their design.
#pragma once

#include "block_tail.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fno::cuda::detail {

// A scalar of T as a float, and a float rounded to T.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half(v);
}

// v rounded to T and back: what a stored-then-reloaded value is.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

// C channels, a channel MLP CM wide.
template <int C, int CM>
struct Shape {
  static_assert(C % 4 == 0 && CM % 4 == 0, "channel counts must be multiples of 4");
  // The fp32 weights in shared memory (the FFMA forward).
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

// ===========================================================================
// Tensor-core kernels (mma.sync; block_tail_forward.cu's forward_tc and
// block_tail_backward.cu's backward_tc): bf16 and half activations, and fp32
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
// and the forward runs fewer CTAs than fit (BlockTailTuning; the measurements
// are in docs/performance.md).
// ===========================================================================
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// Tile geometry for activations of type T: kWP points per warp tile (64-byte
// rows), row stride kS elements (80 bytes: the fragment and per-point accesses
// below are bank-conflict free, rows stay 16-byte aligned).
template <typename T>
struct Geo {
  static constexpr int kWP = 64 / sizeof(T);
  static constexpr int kS = 80 / sizeof(T);
  static constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte chunk
};

// fp32 elements of staged rows as floats and back (16-bit ones: unpack and
// Mma<T>::pack).
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

}  // namespace fno::cuda::detail
