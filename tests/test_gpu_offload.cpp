// offload/ on the GPU (label "gpu"): every policy's gradients against no
// offload through the CUDA copy engine (pinned pool, copy streams, prefetch),
// over several steps so that a copy racing its use would show, and the peak
// memory going down.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"
#include "offload_check.h"

using fno::offload::Offloader;
using fno::offload::OffloadOptions;
using fno::test::rel_err;
using fno::test::run_step;

TEST_CASE("GPU: every offload policy gives the gradients of no offload (1D, 2D, 3D)") {
  struct Case {
    std::vector<int64_t> modes, shape;
  };
  const std::vector<Case> cases = {
      {{8}, {4, 1, 257}}, {{8, 6}, {4, 1, 48, 37}}, {{4, 4, 3}, {2, 1, 13, 12, 9}}};
  for (const auto& c : cases) {
    INFO("input shape ", torch::IntArrayRef(c.shape));
    torch::manual_seed(3);
    fno::FNO model(fno::FNOOptions(c.modes, 1, 1, 16).n_layers(3).domain_padding({0.125}));
    model->to(torch::kCUDA);
    const auto x = torch::randn(c.shape, torch::kCUDA);
    const auto w = torch::rand_like(model->forward(x).detach());
    const auto ref = run_step(model, x, w, nullptr, nullptr);
    const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
    for (const std::string policy : {"all", "blocks:2", "recompute", "recompute+offload"}) {
      for (int64_t chunks : {1, 2}) {
        INFO("policy ", policy, ", chunks ", chunks);
        // min_bytes 0 and a small in-flight window: every saved tensor moves,
        // and forward waits on copies often.
        Offloader off(
            OffloadOptions().min_bytes(0).max_inflight_bytes(1 << 16).max_prefetch_bytes(1 << 18));
        off.exclude(*model);
        const auto plan =
            fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, chunks);
        for (int rep = 0; rep < 3; ++rep) {
          INFO("step ", rep);
          const auto got = run_step(model, x, w, &plan, &off);
          CHECK(rel_err(got.output, ref.output) <= 1e-6);
          for (const auto& kv : ref.grads) {
            // (no structured binding: clang 14 cannot capture one in INFO)
            const auto& name = kv.first;
            const auto& g = kv.second;
            INFO("gradient of ", name);
            CHECK(rel_err(got.grads.at(name), g) <= 1e-5);
          }
          if (policy != "recompute") {
            CHECK(got.stats.bytes_offloaded > 0);
            CHECK(got.stats.d2h_gbps > 0);
            CHECK(got.stats.h2d_gbps > 0);
          }
        }
      }
    }
  }
}

TEST_CASE("GPU: offloading lowers the peak memory of a training step") {
  torch::manual_seed(0);
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32));
  model->to(torch::kCUDA);
  const auto x = torch::randn({4, 1, 256, 256}, torch::kCUDA);
  const auto w = torch::rand({4, 1, 256, 256}, torch::kCUDA);
  const auto stages = fno::fno_stages(model, {256, 256});
  std::map<std::string, int64_t> peak;
  fno::test::StepResult ref;
  for (const std::string policy : {"none", "all", "recompute+offload"}) {
    Offloader off(OffloadOptions().max_inflight_bytes(int64_t{64} << 20));
    off.exclude(*model);
    const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, 1);
    run_step(model, x, w, &plan, &off);  // warm-up: cuFFT plans, pinned pool
    const auto got = run_step(model, x, w, &plan, &off);
    peak[policy] = got.stats.peak_allocated;
    MESSAGE(policy, ": peak ", fno::offload::format_bytes(got.stats.peak_allocated), ", offloaded ",
            fno::offload::format_bytes(got.stats.bytes_offloaded), ", d2h ", got.stats.d2h_gbps,
            " GB/s, h2d ", got.stats.h2d_gbps, " GB/s");
    if (policy == "none") {
      ref = got;
    } else {
      for (const auto& [name, g] : ref.grads) CHECK(rel_err(got.grads.at(name), g) <= 1e-5);
    }
  }
  CHECK(peak["all"] < peak["none"] * 0.7);
  CHECK(peak["recompute+offload"] < peak["all"]);
}
