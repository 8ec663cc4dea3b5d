// Launch tuning and grid sizes of the block-tail kernels (host side; the
// settings themselves: BlockTailTuning in block_tail.h).
#pragma once

#include "block_tail.h"
#include "common.cuh"

#include <algorithm>
#include <cstdint>

namespace fno::cuda::detail {

// The current device's multiprocessor count (at least 1).
int device_sms();

// A persistent grid: at most `per_sm` CTAs per multiprocessor, fewer on small inputs.
int64_t blocks_for(int64_t points, int threads, int per_sm);

// Warp tiles per batch entry of n grid points.
template <typename T>
int64_t tc_tiles_per_batch(int64_t n) {
  return (n + Geo<T>::kWP - 1) / Geo<T>::kWP;
}

// The backward's CTAs: two per multiprocessor (shared memory), fewer on small
// inputs (or where BlockTailTuning caps them); on large inputs, whole waves of
// that persistent grid, as many as keep each warp to at most
// kTcMaxTilesPerWarp tiles. A warp's weight-gradient sums are fp32 MMA
// accumulators over its tiles: the cap bounds how many terms any one of them
// adds at any grid (4096 points in fp32, 8192 in bf16), and the CTAs' partials
// are then added in fp64 (reduce_partials).
constexpr int kTcBackwardPerSm = 2;
constexpr int64_t kTcMaxTilesPerWarp = 256;
template <typename T>
int64_t tc_backward_blocks(int64_t batch, int64_t n, int per_sm = kTcBackwardPerSm) {
  const int64_t tiles = batch * tc_tiles_per_batch<T>(n);
  const int64_t wave = std::max<int64_t>(
      1, std::min<int64_t>((tiles + kWarps - 1) / kWarps, int64_t{device_sms()} * per_sm));
  const int64_t per_wave = wave * kWarps * kTcMaxTilesPerWarp;
  return wave * std::max<int64_t>(1, (tiles + per_wave - 1) / per_wave);
}

}  // namespace fno::cuda::detail
