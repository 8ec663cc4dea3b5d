// Internal to fno_bench's runner (bench.cpp, bench_domain.cpp): --trace.
#pragma once

#include <functional>
#include <string>

namespace fno {

/// step() under the Kineto profiler (CPU ops and CUDA kernels), its Chrome
/// trace written to `path`. Several ranks: only rank 0 (`record`) traces and
/// writes; the others run the same step untraced, so that the ranks' steps
/// still meet.
void traced_step(const std::string& path, bool record, const std::function<void()>& step);

}  // namespace fno
