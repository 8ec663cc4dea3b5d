// Fused backward of an FNO block's pointwise tail (block_tail.h): from dz and
// the stored input and y1, writes da, ds and per-CTA weight-gradient partials
// (backward_tc, on the tensor cores: common.cuh describes the design; the
// steps it shares with block_tail_backward_recompute.cu: backward_steps.cuh), then
// sums the partials over CTAs in a fixed order (reduce_partials_kernel, which
// block_tail_backward_recompute.cu's kernel shares: partials.cuh).
#include "backward_steps.cuh"
#include "block_tail.h"
#include "block_tail_launch.cuh"
#include "block_tail_tuning.cuh"
#include "common.cuh"
#include "fragments.cuh"
#include "gelu.cuh"
#include "mma.cuh"
#include "partials.cuh"
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
// Tensor-core backward
// ---------------------------------------------------------------------------
template <typename T, int C, int CM, bool X3 = false>
struct BwdSmem {
  static constexpr int kRows = C * Geo<T>::kS;
  static constexpr int kRowsM = CM * Geo<T>::kS;
  // per warp: in[2], y1[2], dz[2], dy, da ([C] rows each), gh, dh ([CM] rows)
  static constexpr int kWarpElems = 8 * kRows + 2 * kRowsM;
  static constexpr int kWords = BwdFrags<T, C, CM, X3>::kWords;  // the four fragments only
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
  using F = BwdFrags<T, C, CM, X3>;  // the fragments' offsets in fr
  constexpr int R = L::kRows, RM = L::kRowsM;
  extern __shared__ float4 smem4[];
  T* tiles_sm = reinterpret_cast<T*>(smem4);
  uint32_t* fr = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(smem4) + L::kTileBytes);
  float* sb1 = reinterpret_cast<float*>(fr + L::kWords);
  float* sgate = sb1 + CM;
  F::build(fr, w);
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

  BwdAcc<T, C, CM, X3> acc;  // the weight gradients' sums

  // One tile r, its inputs staged in slot st.
  const auto tile_step = [&](const TileRef& r, int st) {
    T* const s_a = s_in(st);   // a, in place of x when gelu_input
    T* const s_g1 = s_y1(st);  // act(y1), in place of y1
    const T* const s_dzc = s_dz(st);
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
        mm_packed<T, C, CM>(h, pg, fr + F::kW1, lane);
        mm_packed<T, C, CM>(dh, pdz, fr + F::kW2, lane);
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
        acc.add_b1(dh);
        float dy[C / 8][4] = {};
        mm_packed<T, CM, C>(dy, pdh, fr + F::kW1n, lane);
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
        acc.start_da(sgate, lane, dzv, av, dav);
        mm_packed<T, C, C>(dav, pdy, fr + F::kWSkip, lane);
        store_acc<T, C>(s_da, r0, lane, dav);
        __syncwarp();
        acc.add_points(s_dy, s_a, s_dh, s_g1, s_dzc, s_gh, r0, lane);
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
      mm<T, C, CM, X3>(h, g1, fr + F::kW1, lane);
      mm<T, C, CM, X3>(dh, dzv, fr + F::kW2, lane);
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
      // dy1 (ds too), then da = W_skip^T dy1 + gate * dz.
      float dav[C / 8][4];
      acc.template from_dh<kGeluMid>(dh, d1, dzv, av, fr, sgate, s_dy, r0, lane, dav);
      store_acc<T, C>(s_da, r0, lane, dav);
      __syncwarp();
      acc.add_points(s_dy, s_a, s_dh, s_g1, s_dzc, s_gh, r0, lane);
      __syncwarp();
    }
    tile_out<T, C>(ds, s_dy, r, n, lane);
    tile_out<T, C>(da, s_da, r, n, lane);
    __syncwarp();
  };
  walk_tiles<T, C>(ws, int64_t{blockIdx.x} * kWarps + warp, int64_t{gridDim.x} * kWarps, tiles,
                   tiles_per_batch, n, vec_ok, lane, l2pf, tile_step, in, y1, dz);

  acc.write(reinterpret_cast<float*>(smem4), partial);
}

// ---------------------------------------------------------------------------
// Weight-gradient reduction
// ---------------------------------------------------------------------------
// Sums the per-CTA partials over CTAs, in CTA order and in fp64, into the
// gradients (rounded once to fp32).
__global__ void reduce_partials_kernel(const float* __restrict__ partial, int ctas, int entries,
                                       int c, int cm, BlockTailGrads g) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  double sum = 0.0;
  for (int k = 0; k < ctas; ++k) sum += partial[int64_t{k} * entries + e];
  const float acc = static_cast<float>(sum);
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

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------
template <typename T, int C, int CM, bool X3>
struct BackwardTcT {
  using L = BwdSmem<T, C, CM, X3>;
  template <bool kGeluIn, bool kGeluMid>
  static int launch(const void* dz, const void* in, const void* y1, void* da, void* ds, int64_t n,
                    int64_t tpb, int64_t tiles, bool vec, int blocks, const BlockTailWeights& w,
                    float* workspace, cudaStream_t stream) {
    auto kernel = backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, false>;
    if constexpr (sizeof(T) == 2) {
      if (block_tail_tuning().packed) kernel = backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, true>;
    }
    static const cudaError_t attr[2] = {
        cudaFuncSetAttribute(backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(L::kBytes)),
        sizeof(T) == 2
            ? cudaFuncSetAttribute(backward_tc<T, C, CM, kGeluIn, kGeluMid, X3, sizeof(T) == 2>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(L::kBytes))
            : cudaSuccess};
    if (attr[0] != cudaSuccess) return attr[0];
    if (attr[1] != cudaSuccess) return attr[1];
    kernel<<<blocks, kThreads, L::kBytes, stream>>>(
        static_cast<const T*>(dz), static_cast<const T*>(in), static_cast<const T*>(y1),
        static_cast<T*>(da), static_cast<T*>(ds), n, tpb, tiles, vec,
        block_tail_tuning().l2_prefetch, w, workspace);
    return cudaGetLastError();
  }

  static int run(const void* dz, const void* in, const void* y1, void* da, void* ds, int64_t batch,
                 int64_t n, const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                 bool gelu_mid, float* workspace, cudaStream_t stream) {
    const int64_t tpb = tc_tiles_per_batch<T>(n), tiles = batch * tpb;
    constexpr int entries = Shape<C, CM>::kEntries;
    const int cap = block_tail_tuning().backward_ctas_per_sm;
    const int blocks = static_cast<int>(tc_backward_blocks<T>(
        batch, n, cap > 0 ? std::min(cap, kTcBackwardPerSm) : kTcBackwardPerSm));
    if (tiles > 0) {
      const bool vec = n % Geo<T>::kVec == 0 && aligned16(dz) && aligned16(in) && aligned16(y1) &&
                       aligned16(da) && aligned16(ds);
      const auto f = gelu_input ? (gelu_mid ? &launch<true, true> : &launch<true, false>)
                                : (gelu_mid ? &launch<false, true> : &launch<false, false>);
      if (const int err = f(dz, in, y1, da, ds, n, tpb, tiles, vec, blocks, w, workspace, stream))
        return err;
    }
    return reduce_partials(workspace, tiles > 0 ? blocks : 0, entries, C, CM, g, stream);
  }
};

// TF32 (bf16/half: their own MMAs), and 3xTF32 for fp32 where TF32 is not allowed.
template <typename T, int C, int CM>
using BackwardTc = BackwardTcT<T, C, CM, false>;
template <typename T, int C, int CM>
using BackwardTc3 = BackwardTcT<T, C, CM, true>;

}  // namespace

int reduce_partials(float* workspace, int ctas, int entries, int c, int cm, const BlockTailGrads& g,
                    cudaStream_t stream) {
  if (ctas == 0) {
    cudaMemsetAsync(workspace, 0, sizeof(float) * entries, stream);
    ctas = 1;
  }
  reduce_partials_kernel<<<(entries + 255) / 256, 256, 0, stream>>>(workspace, ctas, entries, c, cm,
                                                                    g);
  return cudaGetLastError();
}

}  // namespace detail

int64_t block_tail_backward_workspace(int64_t batch, int64_t channels, int64_t mid, int64_t n) {
  if (block_tail_supported(channels, mid)) {
    // Enough for every dtype (fp32 tiles are the narrowest: the most CTAs).
    const int64_t blocks = std::max(detail::tc_backward_blocks<float>(batch, n),
                                    detail::tc_backward_blocks<__nv_bfloat16>(batch, n));
    return detail::Shape<kCompiledChannels, kCompiledMid>::kEntries * blocks;
  }
  return 0;
}

int block_tail_backward(Dtype dtype, const void* dz, const void* in, const void* y1, void* da,
                        void* ds, int64_t batch, int64_t channels, int64_t mid, int64_t n,
                        const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                        bool gelu_mid, float* workspace, void* stream, Fp32Math fp32) {
  // Fp32Math::kFfma's backward is 3xTF32 (block_tail.h).
  return detail::dispatch<detail::BackwardTc3, detail::BackwardTc, detail::BackwardTc3>(
      dtype, fp32, channels, mid, dz, in, y1, da, ds, batch, n, w, g, gelu_input, gelu_mid,
      workspace, static_cast<cudaStream_t>(stream));
}

}  // namespace fno::cuda
