// What the CUDA micro-benchmarks share: a CUDA error check that ends the
// program with one line, and the median time of a callable on the current stream.
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace fno::bench {

/// Exits with "PROGRAM: what: CUDA's message" when `e` is an error.
inline void check(const char* program, cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// Median milliseconds of f over `reps` runs (after 3 warm-up runs), timed with
/// events on the current stream.
inline double median_ms(const char* program, int reps, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, stop;
  check(program, cudaEventCreate(&start), "event");
  check(program, cudaEventCreate(&stop), "event");
  const auto stream = c10::cuda::getCurrentCUDAStream().stream();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    check(program, cudaEventRecord(start, stream), "record");
    f();
    check(program, cudaEventRecord(stop, stream), "record");
    check(program, cudaEventSynchronize(stop), "sync");
    float t = 0;
    check(program, cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace fno::bench
