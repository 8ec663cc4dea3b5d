// Launch tuning of the block-tail kernels (BlockTailTuning, read from the
// environment at start), grid sizes, and the rest of block_tail.h's host
// queries: which shapes are compiled, CUDA error strings.
#include "block_tail_tuning.cuh"

#include <fno/overrides.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

namespace fno::cuda {
namespace detail {
namespace {

BlockTailTuning tuning_from_env() {
  BlockTailTuning t;
  // Experiment overrides (fno/overrides.h lists them), read once.
  const auto get = [](const char* name, int& v) { v = fno::override_int(name, v); };
  get("FNO_BLOCK_TAIL_FWD_CTAS", t.forward_ctas_per_sm);
  get("FNO_BLOCK_TAIL_BWD_CTAS", t.backward_ctas_per_sm);
  get("FNO_BLOCK_TAIL_L2_PREFETCH", t.l2_prefetch);
  int packed = t.packed ? 1 : 0;
  get("FNO_BLOCK_TAIL_PACKED", packed);
  t.packed = packed != 0;
  return t;
}
BlockTailTuning g_tuning = tuning_from_env();

}  // namespace

int device_sms() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return std::max(sms, 1);
}

int64_t blocks_for(int64_t points, int threads, int per_sm) {
  const int64_t needed = (points + threads - 1) / threads;
  return std::max<int64_t>(1, std::min<int64_t>(needed, int64_t{device_sms()} * per_sm));
}

}  // namespace detail

bool block_tail_supported(int64_t channels, int64_t mid) {
  return channels == kCompiledChannels && mid == kCompiledMid;
}

void set_block_tail_tuning(const BlockTailTuning& tuning) { detail::g_tuning = tuning; }
BlockTailTuning block_tail_tuning() { return detail::g_tuning; }

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace fno::cuda
