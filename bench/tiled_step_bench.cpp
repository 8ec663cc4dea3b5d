// Times the tiled step (fno/tiled.h) against the whole-grid step of the seed
// FNO: forward, H1 loss and backward (no optimizer), one row per plan, with
// the peak GPU memory and what crossed the link (offload/'s HostTiles). A
// developer's micro-benchmark; fno_bench times the training step with auto.
//
//   tiled_step_bench --grid 2048 --batch 1 --plans whole,512:r/d/d/d:d,512:r/h/h/h:d
//
// A plan is ROWS:INPUTS:GRADIENT[:nolatest]: INPUTS one letter per block input
// (d device, h host, r recompute), GRADIENT d or h.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/precision.h>
#include <fno/tiled.h>
#include <fno_offload/planner.h>
#include <fno_engine/tiled_plan.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

fno::TiledPlan parse(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() < 3) throw std::invalid_argument("plan '" + text + "': ROWS:INPUTS:GRADIENT");
  fno::TiledPlan plan;
  plan.tile_rows = std::stoll(parts[0]);
  for (char c : parts[1]) {
    if (c == '/') continue;
    plan.inputs.push_back(c == 'd'   ? fno::TilePlace::kDevice
                          : c == 'h' ? fno::TilePlace::kHost
                                     : fno::TilePlace::kRecompute);
  }
  plan.gradient = parts[2] == "h" ? fno::TilePlace::kHost : fno::TilePlace::kDevice;
  plan.keep_latest = !(parts.size() > 3 && parts[3] == "nolatest");
  return plan;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tiled FNO step against the whole-grid step"};
  int64_t grid = 2048, batch = 1, steps = 3;
  std::string plans = "whole,256:r/d/d/d:d", precision = "fp32", compress = "none";
  app.add_option("--grid", grid, "square grid side")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps (median), after one warm-up")
      ->check(CLI::PositiveNumber);
  app.add_option("--plans", plans, "comma-separated: whole, or ROWS:INPUTS:GRADIENT[:nolatest]");
  app.add_option("--precision", precision, "fp32, tf32, bf16 or fp16");
  app.add_option("--compress", compress, "host storage: none or bf16");
  std::string trace;
  app.add_option("--trace", trace,
                 "write a Chrome trace (CPU ops and CUDA kernels) of one more step of each plan "
                 "to TRACE.PLAN_INDEX.json");
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "tiled_step_bench: no CUDA device\n");
    return 1;
  }
  const auto p = fno::parse_precision(precision);
  const fno::MatmulPrecisionGuard matmul(p);
  torch::manual_seed(0);
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32)
                     .projection_channel_ratio(2)
                     .compute_dtype(fno::compute_dtype(p)));
  model->to(torch::kCUDA);
  const auto x = torch::randn({batch, 1, grid, grid}, torch::kCUDA);
  const auto y = torch::randn({batch, 1, grid, grid}, torch::kCUDA);
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const auto loss = [&](const at::Tensor& out, const at::Tensor& yy) { return h1(out, yy); };
  fno::offload::Offloader off(
      fno::offload::OffloadOptions().compress(fno::offload::parse_compress(compress)));
  std::stringstream list(plans);
  std::printf("%-24s %10s %10s %10s %10s %9s %9s %9s %9s %8s\n", "plan", "ms/step", "peak GiB",
              "out GiB", "in GiB", "d2h ms", "h2d ms", "both ms", "floor ms", "demand");
  int index = -1;
  for (std::string name; std::getline(list, name, ',');) {
    ++index;
    std::vector<double> ms;
    fno::offload::StepStats stats;
    std::string status = "ok";
    try {
      std::unique_ptr<fno::TiledStep> step;
      if (name != "whole") {
        step = std::make_unique<fno::TiledStep>(model, parse(name), [&](const std::string& n) {
          return std::make_unique<fno::PinnedTileStore>(off, n);
        });
      }
      const auto one = [&] {
        if (step) {
          step->forward_backward(x, y, loss);
        } else {
          loss(model->forward(x), y).backward();
        }
      };
      for (int64_t i = 0; i <= steps; ++i) {
        for (auto& q : model->parameters()) q.mutable_grad() = at::Tensor();
        torch::cuda::synchronize();
        off.begin_step();
        const double t0 = now_ms();
        one();
        torch::cuda::synchronize();
        const double t = now_ms() - t0;
        stats = off.end_step();
        if (i > 0) ms.push_back(t);
      }
      if (!trace.empty()) {
        namespace prof = torch::autograd::profiler;
        const torch::profiler::impl::ProfilerConfig cfg(
            torch::profiler::impl::ProfilerState::KINETO);
        const std::set<torch::profiler::impl::ActivityType> acts{
            torch::profiler::impl::ActivityType::CPU, torch::profiler::impl::ActivityType::CUDA};
        prof::prepareProfiler(cfg, acts);
        prof::enableProfiler(cfg, acts);
        for (auto& q : model->parameters()) q.mutable_grad() = at::Tensor();
        one();
        torch::cuda::synchronize();
        prof::disableProfiler()->save(trace + "." + std::to_string(index) + ".json");
      }
    } catch (const c10::OutOfMemoryError&) {
      status = "oom";
    } catch (const std::exception& e) {
      status = std::string("error: ") + e.what();
    }
    for (auto& q : model->parameters()) q.mutable_grad() = at::Tensor();
    c10::cuda::CUDACachingAllocator::emptyCache();
    if (status != "ok") {
      std::printf("%-24s %s\n", name.c_str(), status.substr(0, 200).c_str());
      continue;
    }
    std::sort(ms.begin(), ms.end());
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("%-24s %10.1f %10.2f %10.2f %10.2f %9.1f %9.1f %9.1f %9.1f %8.2f\n", name.c_str(),
                ms[ms.size() / 2], stats.peak_allocated / gib, stats.bytes_offloaded / gib,
                (stats.bytes_prefetched + stats.bytes_fetched_on_demand) / gib,
                stats.d2h_seconds * 1e3, stats.h2d_seconds * 1e3, stats.link_overlap_ms,
                stats.link_floor_ms(), stats.bytes_fetched_on_demand / gib);
    std::fflush(stdout);
  }
  return 0;
}
