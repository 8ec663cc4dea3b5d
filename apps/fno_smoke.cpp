// fno_smoke: builds the Darcy seed FNO and takes a few AdamW steps under the
// H1 loss on random data, printing the parameter count, losses and timings.
// A stand-in main job until fno_train lands. It writes nothing but stdout.
//
// Exit codes: 0 done; 1 the run failed; 2 bad command line; 3 stdout not written.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/optim.h>

#include <CLI/CLI.hpp>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  using fno::cli::integer_in;
  const fno::cli::Fail fail("fno_smoke");
  CLI::App app{"Smoke test of the FNO core: seed model, H1 loss, AdamW steps on random data."};
  std::string device_name = "auto";
  int64_t resolution = 16;
  int64_t batch = 8;
  int64_t steps = 5;
  app.add_option("--device", device_name, "cpu, cuda or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--resolution", resolution, "grid size R (R x R)")
      ->transform(integer_in<int64_t>(4, 8192));
  app.add_option("--batch", batch, "batch size")->transform(integer_in<int64_t>(1, 4096));
  app.add_option("--steps", steps, "optimizer steps")->transform(integer_in<int64_t>(1, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return fno::cli::flushed(fail, app.exit(e));
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }

  try {
    torch::Device device(torch::kCPU);
    if (device_name == "cuda" || (device_name == "auto" && torch::cuda::is_available())) {
      if (!torch::cuda::is_available()) {
        return fail(2, "--device cuda, but no CUDA device is visible");
      }
      device = torch::Device(torch::kCUDA);
    }
    torch::manual_seed(0);
    fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2));
    model->to(device);
    std::cout << *model << "\n";
    std::cout << "n_params " << fno::count_params(*model) << "\n";

    fno::AdamW opt(model->parameters(), fno::AdamWOptions(8e-3).weight_decay(1e-4));
    fno::H1Loss loss(fno::H1LossOptions().d(2));
    auto x = torch::randn({batch, 1, resolution, resolution}, device);
    auto y = torch::randn({batch, 1, resolution, resolution}, device);
    std::vector<double> times;
    for (int64_t s = 0; s < steps; ++s) {
      if (s == 1 && device.is_cuda()) {
        // Peak after the warm-up step, which also creates the cuFFT plans.
        c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
      }
      const auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      auto l = loss(model->forward(x), y);
      l.backward();
      opt.step();
      const double value = l.item<double>();  // synchronizes
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %lld  h1 %.6f  %.1f ms\n", static_cast<long long>(s + 1), value, ms);
      if (s > 0) times.push_back(ms);
    }
    if (!times.empty()) {
      std::sort(times.begin(), times.end());
      std::printf("median step %.1f ms (after the first)\n", times[times.size() / 2]);
    }
    if (device.is_cuda()) {
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
          device.index() < 0 ? 0 : device.index());
      std::printf("peak GPU memory %.3f GiB\n",
                  static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024 * 1024));
    }
    std::printf("device %s  resolution %lld  batch %lld\n", device.str().c_str(),
                static_cast<long long>(resolution), static_cast<long long>(batch));
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  return fno::cli::flushed(fail);
}
