// Warp tiles of the tensor-core kernels: cp.async helpers, the walk over a
// warp's tiles (TileWalk), the copies of a tile's channel rows between
// global memory and the staged rows in shared memory, and the kernels' loop
// over their tiles with the next tile's inputs in flight (walk_tiles).
#pragma once

#include "common.cuh"

#include <cstdint>

namespace fno::cuda::detail {

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

// Stages tile r of the inputs srcs... (C channel rows each) into slot st of a
// warp's staged rows ws: input k's rows at ws + (2k + st) * C * Geo<T>::kS.
template <typename T, int C, typename... Src>
__device__ __forceinline__ void stage_tile(T* ws, int st, const TileRef& r, int64_t n, int lane,
                                           int l2pf, const Src*... srcs) {
  constexpr int R = C * Geo<T>::kS;
  int k = 0;
  (tile_in<T, C>(ws + (2 * k++ + st) * R, srcs, r, n, lane, l2pf), ...);
}

// A warp's walk over its tiles tile, tile + nw, ... (< tiles), its inputs
// srcs... double buffered in its staged rows ws (stage_tile's slots).
// body(r, st) works on tile r, staged in slot st, while the next tile's
// copies are in flight into slot st ^ 1. Returns with every copy landed.
template <typename T, int C, class Body, typename... Src>
__device__ __forceinline__ void walk_tiles(T* ws, int64_t tile, int64_t nw, int64_t tiles,
                                           int64_t tiles_per_batch, int64_t n, bool vec_ok,
                                           int lane, int l2pf, Body&& body, const Src*... srcs) {
  TileWalk walk(tile, nw, tiles_per_batch);
  if (tile < tiles)
    stage_tile<T, C>(ws, 0, tile_ref<T>(walk, n, C, vec_ok), n, lane, l2pf, srcs...);
  cp_async_commit();
  for (int st = 0; tile < tiles; tile += nw, st ^= 1) {
    const TileRef r = tile_ref<T>(walk, n, C, vec_ok);
    walk.next();
    if (tile + nw < tiles) {
      stage_tile<T, C>(ws, st ^ 1, tile_ref<T>(walk, n, C, vec_ok), n, lane, l2pf, srcs...);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
    body(r, st);
  }
  cp_async_wait<0>();
}

}  // namespace fno::cuda::detail
