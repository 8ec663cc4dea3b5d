// offload/ on the GPU (label "gpu"): every policy's gradients against no
// offload through the CUDA copy engine (pinned pool, copy streams, prefetch),
// over several steps so that a copy racing its use would show, and the peak
// memory going down.
#include <fno/fused.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"
#include "offload_check.h"
// (internal to libfno: the LibTorch layers' whole-batch limit)
#include "../libfno/src/whole_batch.h"

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
    for (const std::string policy : {"slim", "all", "blocks:2", "recompute", "recompute+offload"}) {
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
          if (policy != "recompute" && policy != "slim") {
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
  // Against the unfused `none`: the fused block tail (fno/fused.h) stores what
  // slim stores, which would leave slim nothing to save over none. Its
  // backward one batch entry at a time (whole_batch.h), so that the
  // transient, the same under every policy, stays one entry's.
  const fno::FusedKernelsGuard unfused(false);
  const fno::detail::WholeBatchBytesGuard per_entry(0);
  torch::manual_seed(0);
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32));
  model->to(torch::kCUDA);
  const auto x = torch::randn({4, 1, 256, 256}, torch::kCUDA);
  const auto w = torch::rand({4, 1, 256, 256}, torch::kCUDA);
  const auto stages = fno::fno_stages(model, {256, 256});
  std::map<std::string, int64_t> peak, moved;
  fno::test::StepResult ref;
  for (const std::string policy : {"none", "slim", "all", "recompute+offload"}) {
    Offloader off(OffloadOptions().max_inflight_bytes(int64_t{64} << 20));
    off.exclude(*model);
    const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, 1);
    run_step(model, x, w, &plan, &off);  // warm-up: cuFFT plans, pinned pool
    // The step's own peak, above what was allocated before it: earlier test
    // cases' caches (cuFFT plans' work areas, a process group's buffers) stay
    // allocated, and would shrink the ratios below as an offset to all.
    const int64_t before =
        c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
    const auto got = run_step(model, x, w, &plan, &off);
    peak[policy] = got.stats.peak_allocated - before;
    moved[policy] = got.stats.bytes_offloaded;
    MESSAGE(policy, ": peak ", fno::offload::format_bytes(peak[policy]), " above the ",
            fno::offload::format_bytes(before), " allocated before the step, offloaded ",
            fno::offload::format_bytes(got.stats.bytes_offloaded), ", d2h ", got.stats.d2h_gbps,
            " GB/s, h2d ", got.stats.h2d_gbps, " GB/s");
    if (policy == "none") {
      ref = got;
    } else {
      for (const auto& [name, g] : ref.grads) CHECK(rel_err(got.grads.at(name), g) <= 1e-5);
    }
  }
  CHECK(peak["slim"] < peak["none"] * 0.8);
  CHECK(peak["all"] < peak["none"] * 0.7);
  CHECK(peak["all"] < peak["slim"]);
  // Both offload policies run slim stages; at this size they peak in the same
  // backward transient, recompute+offload's a little above (its recomputed
  // stage), well within half of one block activation, while it moves half the
  // bytes.
  const int64_t activation = int64_t{4} * 32 * 256 * 256 * static_cast<int64_t>(sizeof(float));
  CHECK(peak["recompute+offload"] < peak["slim"]);
  CHECK(peak["recompute+offload"] <= peak["all"] + activation / 2);
  CHECK(moved["recompute+offload"] < moved["all"]);
}

// The three ways offloaders have shipped silently wrong gradients, each
// provoked on the GPU with deep prefetch and small in-flight windows.
namespace {

OffloadOptions racy() {
  return OffloadOptions()
      .min_bytes(0)
      .max_inflight_bytes(1 << 12)
      .prefetch_depth(64)
      .max_prefetch_bytes(int64_t{1} << 32);
}

// Large activations and little compute: forward makes bytes far faster than
// the link drains them, so copies lag far behind the kernels.
struct LinkBound {
  fno::FNO model{nullptr};
  torch::Tensor x, w;
  LinkBound() {
    torch::manual_seed(5);
    model = fno::FNO(fno::FNOOptions({4, 4}, 1, 1, 24).n_layers(4));
    model->to(torch::kCUDA);
    x = torch::randn({6, 1, 192, 160}, torch::kCUDA);
    w = torch::rand({6, 1, 192, 160}, torch::kCUDA);
  }
};

}  // namespace

TEST_CASE("GPU: a reload waits for its own copy to the host (deep prefetch, every level)") {
  // Backward starts while copies to the host are still running.
  const LinkBound c;
  const auto& [model, x, w] = c;
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  const auto stages = fno::fno_stages(model, {192, 160});
  for (const std::string policy : {"all", "recompute+offload", "blocks:3"}) {
    for (int64_t chunks : {1, 3}) {
      INFO("policy ", policy, ", chunks ", chunks);
      Offloader off(racy());
      off.exclude(*model);
      const auto plan =
          fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, chunks);
      for (int rep = 0; rep < 4; ++rep) {
        const auto got = run_step(model, x, w, &plan, &off);
        for (const auto& kv : ref.grads) {
          INFO("step ", rep, ", gradient of ", kv.first);
          CHECK(rel_err(got.grads.at(kv.first), kv.second) <= 1e-5);
        }
        CHECK(got.stats.bytes_prefetched > 0);
      }
    }
  }
}

TEST_CASE("GPU: the in-flight window learns until forward stops waiting on the link") {
  // A 1 MiB window holds forward back.
  const LinkBound c;
  const auto& [model, x, w] = c;
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  const auto stages = fno::fno_stages(model, {192, 160});
  const int64_t limit = int64_t{4} << 30;
  Offloader off(OffloadOptions()
                    .min_bytes(0)
                    .max_inflight_bytes(int64_t{1} << 20)
                    .inflight_memory_limit(limit));
  off.exclude(*model);
  const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy("all"), stages, 1);
  std::vector<fno::offload::StepStats> steps;
  for (int rep = 0; rep < 4; ++rep) {
    const auto got = run_step(model, x, w, &plan, &off);
    for (const auto& kv : ref.grads) {
      INFO("step ", rep, ", gradient of ", kv.first);
      CHECK(rel_err(got.grads.at(kv.first), kv.second) <= 1e-5);
    }
    MESSAGE("step ", rep, ": window ", fno::offload::format_bytes(got.stats.inflight_window),
            ", forward waited ", got.stats.forward_wait_ms, " ms (GPU idle ",
            got.stats.forward_stall_ms, " ms), peak ",
            fno::offload::format_bytes(got.stats.peak_allocated));
    CHECK(got.stats.peak_allocated <= limit);
    steps.push_back(got.stats);
  }
  CHECK(steps[0].inflight_window == int64_t{1} << 20);
  CHECK(steps[0].forward_wait_ms > 0);
  CHECK(steps[0].forward_stall_ms > 0);
  CHECK(steps[0].forward_stall_ms <= steps[0].forward_wait_ms + 1.0);
  CHECK(steps[1].inflight_window > steps[0].inflight_window);
  CHECK(off.inflight_window() >= steps[3].inflight_window);
  // Once learned, the GPU stalls a fraction of what it stalled at 1 MiB.
  CHECK(steps[3].forward_stall_ms < 0.5 * steps[0].forward_stall_ms);
  // A fixed window (no limit) never moves.
  Offloader fixed(OffloadOptions().min_bytes(0).max_inflight_bytes(int64_t{1} << 20));
  fixed.exclude(*model);
  for (int rep = 0; rep < 2; ++rep) run_step(model, x, w, &plan, &fixed);
  CHECK(fixed.inflight_window() == int64_t{1} << 20);
}

TEST_CASE("GPU: views of one storage (transposed, sliced) each come back as their own view") {
  torch::manual_seed(6);
  const auto x =
      torch::randn({256, 192}, torch::TensorOptions().device(torch::kCUDA)).requires_grad_(true);
  // b and c require grad, so the products save the views of a (leaves that
  // require grad are kept like parameters).
  const auto b =
      torch::randn({64, 256}, torch::TensorOptions().device(torch::kCUDA)).requires_grad_(true);
  const auto c =
      torch::randn({100, 192}, torch::TensorOptions().device(torch::kCUDA)).requires_grad_(true);
  auto f = [&](const torch::Tensor& xx) {
    const auto a = xx.sin();  // a non-leaf: offloadable
    // mm saves a (its second operand), the second product a slice with an
    // offset, pow a strided slice, and the last mm the transposed view.
    return torch::mm(b, a).pow(2).sum() + (a.narrow(0, 50, 100) * c).pow(2).sum() +
           a.slice(1, 1, 192, 3).pow(3).sum() + torch::mm(a.t(), b.t()).pow(2).sum();
  };
  const auto xr = x.detach().clone().requires_grad_(true);
  f(xr).backward();
  for (int rep = 0; rep < 3; ++rep) {
    Offloader off(racy());
    x.mutable_grad() = torch::Tensor();
    off.begin_step();
    {
      fno::offload::OffloadGuard guard(off);
      f(x).backward();
    }
    const auto s = off.end_step();
    CHECK(s.dedup_hits >= 2);
    CHECK(rel_err(x.grad(), xr.grad()) <= 1e-6);
  }
}

TEST_CASE("GPU: a freed address reused by a later tensor is not taken for one already moved") {
  torch::manual_seed(7);
  const auto x =
      torch::randn({1 << 20}, torch::TensorOptions().device(torch::kCUDA)).requires_grad_(true);
  const auto xr = x.detach().clone().requires_grad_(true);
  ((xr * 2).sin().sum() + (xr * 3).cos().sum() + (xr.narrow(0, 0, 16) * 1).sin().sum()).backward();
  Offloader off(racy());
  off.begin_step();
  torch::Tensor loss;
  bool reused = false;
  {
    fno::offload::OffloadGuard guard(off);
    auto t1 = x * 2;
    const void* p1 = t1.data_ptr();
    auto y1 = t1.sin();  // saves t1, which is copied out and released
    t1 = torch::Tensor();
    torch::cuda::synchronize();
    // Another save makes the offloader see t1's copy done and let go of its block.
    auto y0 = (x.narrow(0, 0, 16) * 1).sin();
    auto t2 = x * 3;  // the caching allocator hands out t1's old block
    reused = t2.data_ptr() == p1;
    auto y2 = t2.cos();
    loss = y1.sum() + y2.sum() + y0.sum();
  }
  loss.backward();
  const auto s = off.end_step();
  MESSAGE("second tensor at the first one's address: ", reused);
  CHECK(s.offloaded_tensors == 3);
  CHECK(s.dedup_hits == 0);
  CHECK(rel_err(x.grad(), xr.grad()) <= 1e-6);
}

TEST_CASE("GPU: compressed offload (bf16) keeps gradients within bfloat16 rounding") {
  torch::manual_seed(8);
  fno::FNO model(fno::FNOOptions({8, 8}, 1, 1, 16).n_layers(3));
  model->to(torch::kCUDA);
  const auto x = torch::randn({4, 1, 64, 64}, torch::kCUDA);
  const auto w = torch::rand({4, 1, 64, 64}, torch::kCUDA);
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  const auto stages = fno::fno_stages(model, {64, 64});
  for (const std::string policy : {"all", "recompute+offload"}) {
    INFO("policy ", policy);
    Offloader off(racy().compress(fno::offload::Compress::kBF16));
    off.exclude(*model);
    const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, 2);
    for (int rep = 0; rep < 3; ++rep) {
      const auto got = run_step(model, x, w, &plan, &off);
      CHECK(got.stats.compressed_tensors > 0);
      double worst = 0;
      for (const auto& kv : ref.grads)
        worst = std::max(worst, rel_err(got.grads.at(kv.first), kv.second));
      MESSAGE(policy, " bf16, step ", rep, ": worst gradient error ", worst);
      CHECK(worst <= 2e-2);
      CHECK(worst > 0);
    }
  }
}
