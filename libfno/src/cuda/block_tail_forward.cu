// Fused forward of an FNO block's pointwise tail (block_tail.h): reads a and
// s, writes y1 and z (block_tail_forward), or only the next block's input
// GELU(z) or z (kNext: block_tail_forward_next, for the tiled step).
//
// Two kernels: forward_tc on the tensor cores (common.cuh describes the
// design) for bf16 and half activations and for fp32 ones (TF32 where it is
// allowed, else 3xTF32: fp32-level error); and forward_kernel, fp32 products
// on the CUDA cores (Fp32Math::kFfma, the fp32 default, whose backward is the
// 3xTF32 tensor-core kernel: block_tail.h says why).
//
// FFMA forward: one thread owns one grid point: its C-channel vectors live in
// registers and channel c is read at (b * C + c) * N + n, so a warp's loads of
// one channel are coalesced. Weights sit in shared memory as fp32 and are read
// with uniform (broadcast) 16-byte loads.
#include "block_tail.h"
#include "block_tail_launch.cuh"
#include "block_tail_tuning.cuh"
#include "common.cuh"
#include "fragments.cuh"
#include "gelu.cuh"
#include "mma.cuh"
#include "tiles.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace fno::cuda {
namespace detail {
namespace {

// ---------------------------------------------------------------------------
// FFMA forward (fp32)
// ---------------------------------------------------------------------------
// Element access (the FFMA forward runs fp32 only).
__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

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

constexpr int kFwdThreads = 256;

// kNext: writes out = GELU(z as rounded to T) where kGeluMid, else z, to z,
// and no y1 (y1 unused).
template <typename T, int C, int CM, bool kGeluMid, bool kNext>
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
      if constexpr (!kNext) store(y1 + base + i * n, v);
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
      if constexpr (kNext) {
        const float zi = round_to<T>(fmaf(sw[S::kGate + i], av[i], v));
        store(z + base + i * n, kGeluMid ? gelu_fast(zi) : zi);
      } else {
        store(z + base + i * n, fmaf(sw[S::kGate + i], av[i], v));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Tensor-core forward
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

// kNext: as forward_kernel's.
template <typename T, int C, int CM, bool kGeluMid, bool X3, bool kNext>
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
  // One tile r, its inputs staged in slot st.
  const auto tile_step = [&](const TileRef& r, int st) {
#pragma unroll
    for (int r0 = 0; r0 < Geo<T>::kWP; r0 += 16) {
      float av[C / 8][4], y[C / 8][4];
      load_acc<T, C>(s_a(st), r0, lane, av);
      load_acc<T, C>(s_s(st), r0, lane, y);
      mm<T, C, C, X3>(y, av, fr + L::kWSkip, lane);  // y1 = W_skip a + s
      if constexpr (!kNext) {
        store_acc<T, C>(s_a(st), r0, lane, y);  // (in place of a)
      }
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
      if constexpr (kNext) {
        // The next block's input: GELU of z as stored (rounded to T).
#pragma unroll
        for (int j = 0; j < C / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            zv[j][e] = round_to<T>(zv[j][e]);
            if (kGeluMid) zv[j][e] = gelu_fast(zv[j][e]);
          }
      }
      store_acc<T, C>(s_s(st), r0, lane, zv);  // (in place of s)
    }
    __syncwarp();
    if constexpr (!kNext) tile_out<T, C>(y1, s_a(st), r, n, lane);
    tile_out<T, C>(z, s_s(st), r, n, lane);
    __syncwarp();
  };
  walk_tiles<T, C>(ws, int64_t{blockIdx.x} * kWarps + warp, int64_t{gridDim.x} * kWarps, tiles,
                   tiles_per_batch, n, vec_ok, lane, l2pf, tile_step, a, s);
}

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------
// kNext: block_tail_forward_next (z is then its output, y1 null).
template <typename T, int C, int CM, bool kNext>
struct ForwardT {
  static int run(const void* a, const void* s, void* z, void* y1, int64_t batch, int64_t n,
                 const BlockTailWeights& w, bool gelu_mid, cudaStream_t stream) {
    const int64_t points = batch * n;
    if (points == 0) return cudaSuccess;
    auto kernel =
        gelu_mid ? forward_kernel<T, C, CM, true, kNext> : forward_kernel<T, C, CM, false, kNext>;
    static const int per_sm[2] = {occupancy(forward_kernel<T, C, CM, false, kNext>),
                                  occupancy(forward_kernel<T, C, CM, true, kNext>)};
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

template <typename T, int C, int CM, bool X3, bool kNext>
struct ForwardTcT {
  using L = FwdSmem<T, C, CM, X3>;
  template <bool kGeluMid>
  static int occupancy() {
    static const int per_sm = [] {
      auto kernel = forward_tc<T, C, CM, kGeluMid, X3, kNext>;
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(L::kBytes)) != cudaSuccess)
        return 0;
      int blocks = 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, L::kBytes);
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
    // Fewer CTAs than fit run faster with the L2 prefetch (the sweep is in
    // docs/performance.md): by default 2 a multiprocessor for 4-byte types, 3
    // for 2-byte ones.
    const BlockTailTuning tuning = block_tail_tuning();
    const int cap =
        tuning.forward_ctas_per_sm > 0 ? tuning.forward_ctas_per_sm : (sizeof(T) == 4 ? 2 : 3);
    per_sm = std::min(per_sm, cap);
    const int64_t blocks = std::max<int64_t>(
        1, std::min<int64_t>((tiles + kWarps - 1) / kWarps, int64_t{device_sms()} * per_sm));
    const bool vec = n % Geo<T>::kVec == 0 && aligned16(a) && aligned16(s) && aligned16(z) &&
                     (kNext || aligned16(y1));
    auto kernel =
        gelu_mid ? forward_tc<T, C, CM, true, X3, kNext> : forward_tc<T, C, CM, false, X3, kNext>;
    kernel<<<static_cast<unsigned>(blocks), kThreads, L::kBytes, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(s), static_cast<T*>(z), static_cast<T*>(y1),
        n, tpb, tiles, vec, tuning.l2_prefetch, w);
    return cudaGetLastError();
  }
};

// The launchers dispatch() picks from: the FFMA forward (fp32), TF32 (bf16/half:
// their own MMAs), and 3xTF32 for fp32 where TF32 is not allowed; each for
// block_tail_forward and (Next) block_tail_forward_next.
template <typename T, int C, int CM>
using Forward = ForwardT<T, C, CM, false>;
template <typename T, int C, int CM>
using ForwardTc = ForwardTcT<T, C, CM, false, false>;
template <typename T, int C, int CM>
using ForwardTc3 = ForwardTcT<T, C, CM, true, false>;
template <typename T, int C, int CM>
using ForwardNext = ForwardT<T, C, CM, true>;
template <typename T, int C, int CM>
using ForwardNextTc = ForwardTcT<T, C, CM, false, true>;
template <typename T, int C, int CM>
using ForwardNextTc3 = ForwardTcT<T, C, CM, true, true>;

}  // namespace
}  // namespace detail

int block_tail_forward(Dtype dtype, const void* a, const void* s, void* z, void* y1, int64_t batch,
                       int64_t channels, int64_t mid, int64_t n, const BlockTailWeights& w,
                       bool gelu_mid, void* stream, Fp32Math fp32) {
  return detail::dispatch<detail::Forward, detail::ForwardTc, detail::ForwardTc3>(
      dtype, fp32, channels, mid, a, s, z, y1, batch, n, w, gelu_mid,
      static_cast<cudaStream_t>(stream));
}

int block_tail_forward_next(Dtype dtype, const void* a, const void* s, void* out, int64_t batch,
                            int64_t channels, int64_t mid, int64_t n, const BlockTailWeights& w,
                            bool gelu_mid, void* stream, Fp32Math fp32) {
  return detail::dispatch<detail::ForwardNext, detail::ForwardNextTc, detail::ForwardNextTc3>(
      dtype, fp32, channels, mid, a, s, out, static_cast<void*>(nullptr), batch, n, w, gelu_mid,
      static_cast<cudaStream_t>(stream));
}

}  // namespace fno::cuda
