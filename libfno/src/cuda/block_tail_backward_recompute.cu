// Fused backward of an FNO block's pointwise tail for the tiled step
// (block_tail.h: block_tail_backward_recompute): from g, the gradient of
// block_tail_forward_next's output, and the block's input a and spectral
// output s, writes da, ds and per-CTA weight-gradient partials
// (backward_recompute_tc), then sums the partials over CTAs in a fixed order
// (reduce_partials: partials.cuh).
//
// backward_recompute_tc is block_tail_backward.cu's backward_tc (common.cuh
// describes the design; its unpacked form, every dtype) with the forward
// recomputed in front: per 16-point group, y1 = W_skip a + s, the hidden layer
// and z as forward_tc computes them (y1 and z rounded to T as stored), then dz
// = GELU'(z) g (gelu_mid) and from dz on backward_tc's steps (the same code
// from dh on: backward_steps.cuh). It stages a, s
// and g (double buffered); a group's act(y1) replaces its s, its dz its g
// (the weight gradients read both), and its da its a once the weight
// gradients are done with a (no da rows: the two fp32 CTAs a multiprocessor
// that backward_tc runs still fit with the two forward fragments added).
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

template <typename T, int C, int CM, bool X3 = false>
struct RecSmem {
  static constexpr int kRows = C * Geo<T>::kS;
  static constexpr int kRowsM = CM * Geo<T>::kS;
  // per warp: a[2], s[2], g[2], dy ([C] rows each), gh, dh ([CM] rows)
  static constexpr int kWarpElems = 7 * kRows + 2 * kRowsM;
  // backward_tc's four fragments (BwdFrags), then the forward's W_skip and W2 (forward_tc's)
  static constexpr int kWSkipF = BwdFrags<T, C, CM, X3>::kWords;     // B(j, i) = W_skip[i][j]
  static constexpr int kW2F = kWSkipF + BFrag<T, C, C, X3>::kWords;  // B(k, i) = W2[i][k]
  static constexpr int kWords = kW2F + BFrag<T, CM, C, X3>::kWords;
  static constexpr size_t kTileBytes = sizeof(T) * kWarps * kWarpElems;
  // then b1 [CM], b2 [C], gate [C] in fp32
  static constexpr size_t kBytes = kTileBytes + 4 * kWords + 4 * (CM + 2 * C);
  static_assert(kTileBytes % 16 == 0, "B fragments are read with 16-byte loads");
  static_assert(kTileBytes >= sizeof(float) * kWarps * Shape<C, CM>::kEntries,
                "the CTA's reduction reuses the tiles");
};

template <typename T, int C, int CM, bool kGeluMid, bool X3>
__global__ void __launch_bounds__(kThreads, 2)
    backward_recompute_tc(const T* __restrict__ g, const T* __restrict__ a, const T* __restrict__ s,
                          T* __restrict__ da, T* __restrict__ ds, int64_t n,
                          int64_t tiles_per_batch, int64_t tiles, bool vec_ok, int l2pf,
                          BlockTailWeights w, float* __restrict__ partial) {
  using L = RecSmem<T, C, CM, X3>;
  using F = BwdFrags<T, C, CM, X3>;  // backward_tc's fragments' offsets in fr
  constexpr int R = L::kRows, RM = L::kRowsM;
  extern __shared__ float4 smem4[];
  T* tiles_sm = reinterpret_cast<T*>(smem4);
  uint32_t* fr = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(smem4) + L::kTileBytes);
  float* sb1 = reinterpret_cast<float*>(fr + L::kWords);
  float* sb2 = sb1 + CM;
  float* sgate = sb2 + C;
  F::build(fr, w);
  build_bfrag<T, C, C, X3>(fr + L::kWSkipF, [&](int k, int nn) { return w.w_skip[nn * C + k]; });
  build_bfrag<T, CM, C, X3>(fr + L::kW2F, [&](int k, int nn) { return w.w2[nn * CM + k]; });
  for (int i = threadIdx.x; i < CM; i += blockDim.x) sb1[i] = w.b1[i];
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    sb2[i] = w.b2[i];
    sgate[i] = w.gate[i];
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* ws = tiles_sm + warp * L::kWarpElems;
  // (stage st of the inputs: a, s, g at ws + (0, 2, 4 + st) * R)
  const auto s_a = [&](int st) { return ws + st * R; };
  const auto s_s = [&](int st) { return ws + (2 + st) * R; };
  const auto s_g = [&](int st) { return ws + (4 + st) * R; };
  T* s_dy = ws + 6 * R;
  T* s_gh = ws + 7 * R;
  T* s_dh = s_gh + RM;

  BwdAcc<T, C, CM, X3> acc;  // the weight gradients' sums

  // One tile r, its inputs staged in slot st.
  const auto tile_step = [&](const TileRef& r, int st) {
    T* const s_ad = s_a(st);  // a; a group's da in place of its a at the end
    T* const s_g1 = s_s(st);  // act(y1), in place of s
    T* const s_dz = s_g(st);  // dz, in place of g
#pragma unroll 1
    for (int r0 = 0; r0 < Geo<T>::kWP; r0 += 16) {
      // Points past the end read zeros: with g = 0, dz = 0 and they add
      // nothing to any gradient.
      // y1 = W_skip a + s, as forward_tc computes it, rounded to T as stored.
      float av[C / 8][4], g1[C / 8][4], d1[C / 8][4];
      load_acc<T, C>(s_ad, r0, lane, av);
      load_acc<T, C>(s_g1, r0, lane, g1);  // s
      mm<T, C, C, X3>(g1, av, fr + L::kWSkipF, lane);
#pragma unroll
      for (int j = 0; j < C / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          g1[j][e] = round_to<T>(g1[j][e]);
          if (kGeluMid) {
            gelu_and_grad_fast(g1[j][e], g1[j][e], d1[j][e]);
            g1[j][e] = round_to<T>(g1[j][e]);
          }
        }
      store_acc<T, C>(s_g1, r0, lane, g1);
      // Hidden layer h = W1 act(y1) + b1; GELU(h), GELU'(h).
      float h[CM / 8][4], dgh[CM / 8][4];
      fill_cols<CM>(sb1, lane, h);
      mm<T, C, CM, X3>(h, g1, fr + F::kW1, lane);
#pragma unroll
      for (int j = 0; j < CM / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) gelu_and_grad_fast(h[j][e], h[j][e], dgh[j][e]);
      store_acc<T, CM>(s_gh, r0, lane, h);
      // z = W2 GELU(h) + b2 + gate * a, as forward_tc computes it; then
      // dz = GELU'(z as rounded to T) * g, rounded to T, where gelu_mid, else g.
      float zv[C / 8][4], b2v[C / 8][4];
      fill_cols<C>(sgate, lane, zv);
      fill_cols<C>(sb2, lane, b2v);
#pragma unroll
      for (int j = 0; j < C / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) zv[j][e] = fmaf(zv[j][e], av[j][e], b2v[j][e]);
      mm<T, CM, C, X3>(zv, h, fr + L::kW2F, lane);
      float dzv[C / 8][4];
      load_acc<T, C>(s_dz, r0, lane, dzv);  // g
      if (kGeluMid) {
#pragma unroll
        for (int j = 0; j < C / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float gz, dgz;
            gelu_and_grad_fast(round_to<T>(zv[j][e]), gz, dgz);
            dzv[j][e] = round_to<T>(dzv[j][e] * dgz);
          }
        store_acc<T, C>(s_dz, r0, lane, dzv);
      }
      // From here backward_tc's steps: dh = GELU'(h) * W2^T dz.
      float dh[CM / 8][4] = {};
      mm<T, C, CM, X3>(dh, dzv, fr + F::kW2, lane);
#pragma unroll
      for (int j = 0; j < CM / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dh[j][e] = round_to<T>(dh[j][e] * dgh[j][e]);
      store_acc<T, CM>(s_dh, r0, lane, dh);
      // dy1 (ds too), then da = W_skip^T dy1 + gate * dz.
      float dav[C / 8][4];
      acc.template from_dh<kGeluMid>(dh, d1, dzv, av, fr, sgate, s_dy, r0, lane, dav);
      // The weight gradients over these 16 points, then da in place of their a.
      __syncwarp();
      acc.add_points(s_dy, s_ad, s_dh, s_g1, s_dz, s_gh, r0, lane);
      __syncwarp();
      store_acc<T, C>(s_ad, r0, lane, dav);
    }
    __syncwarp();
    tile_out<T, C>(ds, s_dy, r, n, lane);
    tile_out<T, C>(da, s_ad, r, n, lane);
    __syncwarp();
  };
  walk_tiles<T, C>(ws, int64_t{blockIdx.x} * kWarps + warp, int64_t{gridDim.x} * kWarps, tiles,
                   tiles_per_batch, n, vec_ok, lane, l2pf, tile_step, a, s, g);
  acc.write(reinterpret_cast<float*>(smem4), partial);
}

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------
template <typename T, int C, int CM, bool X3>
struct BackwardRecomputeTcT {
  using L = RecSmem<T, C, CM, X3>;
  template <bool kGeluMid>
  static int launch(const void* g, const void* a, const void* s, void* da, void* ds, int64_t n,
                    int64_t tpb, int64_t tiles, bool vec, int blocks, const BlockTailWeights& w,
                    float* workspace, cudaStream_t stream) {
    const auto kernel = backward_recompute_tc<T, C, CM, kGeluMid, X3>;
    static const cudaError_t attr = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes));
    if (attr != cudaSuccess) return attr;
    kernel<<<blocks, kThreads, L::kBytes, stream>>>(
        static_cast<const T*>(g), static_cast<const T*>(a), static_cast<const T*>(s),
        static_cast<T*>(da), static_cast<T*>(ds), n, tpb, tiles, vec,
        block_tail_tuning().l2_prefetch, w, workspace);
    return cudaGetLastError();
  }

  static int run(const void* g, const void* a, const void* s, void* da, void* ds, int64_t batch,
                 int64_t n, const BlockTailWeights& w, const BlockTailGrads& grads, bool gelu_mid,
                 float* workspace, cudaStream_t stream) {
    const int64_t tpb = tc_tiles_per_batch<T>(n), tiles = batch * tpb;
    // backward_tc's grid: block_tail_backward_workspace covers it.
    const int cap = block_tail_tuning().backward_ctas_per_sm;
    const int blocks = static_cast<int>(tc_backward_blocks<T>(
        batch, n, cap > 0 ? std::min(cap, kTcBackwardPerSm) : kTcBackwardPerSm));
    if (tiles > 0) {
      const bool vec = n % Geo<T>::kVec == 0 && aligned16(g) && aligned16(a) && aligned16(s) &&
                       aligned16(da) && aligned16(ds);
      const auto f = gelu_mid ? &launch<true> : &launch<false>;
      if (const int err = f(g, a, s, da, ds, n, tpb, tiles, vec, blocks, w, workspace, stream))
        return err;
    }
    return reduce_partials(workspace, tiles > 0 ? blocks : 0, Shape<C, CM>::kEntries, C, CM, grads,
                           stream);
  }
};

// TF32 (bf16/half: their own MMAs), and 3xTF32 for fp32 where TF32 is not allowed.
template <typename T, int C, int CM>
using BackwardRecomputeTc = BackwardRecomputeTcT<T, C, CM, false>;
template <typename T, int C, int CM>
using BackwardRecomputeTc3 = BackwardRecomputeTcT<T, C, CM, true>;

}  // namespace
}  // namespace detail

int block_tail_backward_recompute(Dtype dtype, const void* g, const void* a, const void* s,
                                  void* da, void* ds, int64_t batch, int64_t channels, int64_t mid,
                                  int64_t n, const BlockTailWeights& w, const BlockTailGrads& grads,
                                  bool gelu_mid, float* workspace, void* stream, Fp32Math fp32) {
  // Fp32Math::kFfma's backward is 3xTF32 (block_tail.h), as block_tail_backward's.
  return detail::dispatch<detail::BackwardRecomputeTc3, detail::BackwardRecomputeTc,
                          detail::BackwardRecomputeTc3>(dtype, fp32, channels, mid, g, a, s, da, ds,
                                                        batch, n, w, grads, gelu_mid, workspace,
                                                        static_cast<cudaStream_t>(stream));
}

}  // namespace fno::cuda
