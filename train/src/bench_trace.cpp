#include "bench_trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <set>

namespace fno {

void traced_step(const std::string& path, bool record, const std::function<void()>& step) {
  if (!record) {
    step();
    torch::cuda::synchronize();
    return;
  }
  namespace prof = torch::autograd::profiler;
  const torch::profiler::impl::ProfilerConfig cfg(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<torch::profiler::impl::ActivityType> acts{
      torch::profiler::impl::ActivityType::CPU, torch::profiler::impl::ActivityType::CUDA};
  prof::prepareProfiler(cfg, acts);
  prof::enableProfiler(cfg, acts);
  step();
  torch::cuda::synchronize();
  prof::disableProfiler()->save(path);
}

}  // namespace fno
