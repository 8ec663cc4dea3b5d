// Tiled steps on the GPU (label "gpu"): with the fused block tail, in fp32 the
// loss and gradients of the whole-grid step (all placements, block inputs and
// the gradient in pinned host memory through offload/'s HostTiles, nothing
// fetched on demand); in tf32, bf16 and fp16 as close to the fp32 step as the
// whole-grid step of that precision; 3D; and one block input of more than
// 2^31 elements against the whole-grid step.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno/tiled.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/tiled_plan.h>
#include <fno_train/train_step.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"
#include "grad_check.h"

using fno::TilePlace;
using fno::test::check_same;
using fno::test::float64_grads;
using fno::test::fp32_noise;
using fno::test::Grads;
using fno::test::rel_err;
using fno::test::run;

namespace {

using Loss = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

// The bytes the allocator holds for tensors now, with its cache emptied (what
// a budget has to add room to).
int64_t held_after_empty_cache() {
  c10::cuda::CUDACachingAllocator::emptyCache();
  return static_cast<int64_t>(
      c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
          .allocated_bytes[0]
          .current);
}

fno::FNO seed_model(std::vector<int64_t> modes = {16, 16}) {
  torch::manual_seed(21);
  fno::FNO model(fno::FNOOptions(modes, 1, 1, 32).projection_channel_ratio(2));
  if (modes.size() == 2) {
    fno::load_state_dict(*model, fno::load_tensor_dict(fno::test::golden_path("seed_state.pt")));
  }
  model->to(torch::kCUDA);
  return model;
}

Grads whole_grid(fno::FNO& model, const at::Tensor& x, const at::Tensor& y, const Loss& loss) {
  return run(model, [&] {
    auto l = loss(model->forward(x), y);
    l.backward();
    return l.detach();
  });
}

}  // namespace

TEST_CASE("GPU: tiled steps give the whole-grid step's gradients (fused kernels, host tiles)") {
  auto model = seed_model();
  torch::manual_seed(22);
  const auto x = torch::randn({2, 1, 200, 173}, torch::kCUDA);
  const auto y = torch::randn({2, 1, 200, 173}, torch::kCUDA) + 1;
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) { return h1(out, yy); };
  const auto ref = whole_grid(model, x, y, loss);
  const auto f64 = float64_grads(model, x, y, loss);
  const double noise = fp32_noise(ref, f64);
  MESSAGE("the whole-grid fp32 step's worst gradient error against float64: ", noise);
  fno::offload::Offloader off(fno::offload::OffloadOptions().max_inflight_bytes(8 << 20));
  const fno::TileStoreFactory host = [&](const std::string& name) {
    return std::make_unique<fno::PinnedTileStore>(off, name);
  };
  const auto four = [](TilePlace a, TilePlace b, TilePlace c, TilePlace d) {
    return std::vector<TilePlace>{a, b, c, d};
  };
  using P = TilePlace;
  std::vector<fno::TiledPlan> plans(5);
  plans[0].tile_rows = 48;  // 5 tiles, the last of 8 rows
  plans[1].tile_rows = 200;
  plans[2].tile_rows = 32;
  plans[2].inputs = four(P::kRecompute, P::kHost, P::kHost, P::kHost);
  plans[2].gradient = P::kHost;
  plans[2].keep_latest = false;
  plans[3].tile_rows = 17;
  plans[3].inputs = four(P::kRecompute, P::kRecompute, P::kHost, P::kRecompute);
  plans[3].gradient = P::kHost;
  plans[4].tile_rows = 64;
  plans[4].inputs = four(P::kHost, P::kDevice, P::kRecompute, P::kHost);
  for (const auto& plan : plans) {
    INFO(plan.to_string());
    fno::TiledStep step(model, plan, host);
    for (int i = 0; i < 2; ++i) {
      off.begin_step();
      const auto got = run(model, [&] { return step.forward_backward(x, y, loss); });
      const auto stats = off.end_step();
      check_same(got, ref, f64, noise);
      CHECK(stats.bytes_fetched_on_demand == 0);
      if (stats.bytes_offloaded > 0) {
        CHECK(stats.bytes_prefetched > 0);
        CHECK(stats.d2h_peak_gbps > 0);
        CHECK(stats.link_floor_ms() > 0);
        MESSAGE(plan.to_string(), ": ", stats.to_json());
      }
    }
    torch::NoGradGuard no_grad;
    CHECK(rel_err(step.forward(x), model->forward(x)) <= 1e-6);
  }
}

TEST_CASE("GPU: tiled steps in tf32, bf16 and fp16 follow fp32 as the whole-grid steps do; 3D") {
  auto model = seed_model();
  torch::manual_seed(23);
  const auto x = torch::randn({2, 1, 160, 150}, torch::kCUDA);
  const auto y = torch::randn({2, 1, 160, 150}, torch::kCUDA) + 1;
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  // Scaled as the fp16 loss scaler would, so that fp16 gradients do not underflow.
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) {
    return h1(out, yy) * 65536.0;
  };
  const auto fp32 = whole_grid(model, x, y, loss);
  fno::TiledPlan plan;
  plan.tile_rows = 40;
  for (const auto p : {fno::Precision::kTF32, fno::Precision::kBF16, fno::Precision::kFP16}) {
    INFO("precision ", fno::to_string(p));
    const fno::MatmulPrecisionGuard matmul(p);
    model->options.compute_dtype(fno::compute_dtype(p));
    const auto whole = whole_grid(model, x, y, loss);
    fno::TiledStep step(model, plan);
    const auto tiled = run(model, [&] { return step.forward_backward(x, y, loss); });
    model->options.compute_dtype(torch::kFloat);
    // Every gradient together, and the loss: no further from fp32 than the
    // whole-grid step of the same precision, with a little room (rounding
    // of one ulp of that precision lands elsewhere).
    const double whole_err = rel_err(fno::test::flat(whole), fno::test::flat(fp32));
    const double tiled_err = rel_err(fno::test::flat(tiled), fno::test::flat(fp32));
    MESSAGE(fno::to_string(p), ": gradient error against fp32: whole grid ", whole_err, ", tiled ",
            tiled_err);
    CHECK(tiled_err <= 1.5 * whole_err + 1e-5);
    CHECK(rel_err(tiled.loss, fp32.loss) <= 1.5 * rel_err(whole.loss, fp32.loss) + 1e-6);
  }
  // 3D, fp32, with host tiles.
  auto model3 = seed_model({8, 8, 8});
  const auto x3 = torch::randn({1, 1, 40, 36, 34}, torch::kCUDA);
  const auto y3 = torch::randn({1, 1, 40, 36, 34}, torch::kCUDA) + 1;
  const fno::H1Loss h3(fno::H1LossOptions().d(3));
  const Loss loss3 = [&](const at::Tensor& out, const at::Tensor& yy) { return h3(out, yy); };
  const auto ref3 = whole_grid(model3, x3, y3, loss3);
  const auto f64 = float64_grads(model3, x3, y3, loss3);
  fno::offload::Offloader off;
  fno::TiledPlan plan3;
  plan3.tile_rows = 7;
  plan3.inputs = {TilePlace::kRecompute, TilePlace::kHost, TilePlace::kDevice, TilePlace::kHost};
  plan3.gradient = TilePlace::kHost;
  fno::TiledStep step3(model3, plan3, [&](const std::string& name) {
    return std::make_unique<fno::PinnedTileStore>(off, name);
  });
  const auto got3 = run(model3, [&] { return step3.forward_backward(x3, y3, loss3); });
  check_same(got3, ref3, f64, fp32_noise(ref3, f64));
}

TEST_CASE("GPU: a tiled step over a block input of more than 2^31 elements") {
  // [1, 32, 8256, 8192]: 2.16e9 elements (8.06 GiB) per block input. The
  // whole-grid reference runs as recompute+offload (stage inputs on the host,
  // one stage's working set on the GPU: about 60 GiB).
  size_t free = 0, total = 0;
  c10::cuda::CUDACachingAllocator::emptyCache();
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (free < (size_t{72} << 30)) {
    MESSAGE("skipped: needs 72 GiB of free GPU memory, has ", free >> 30, " GiB");
    return;
  }
  auto model = seed_model();
  torch::manual_seed(24);
  const auto x = torch::randn({1, 1, 8256, 8192}, torch::kCUDA);
  // Smooth targets, as PDE solutions are: with white noise the H1 loss's
  // derivative terms dominate, and the sums behind a bias gradient cancel to
  // 1e-3 of their terms, whatever computes them.
  const auto r = torch::linspace(0, 1, 8256, torch::kCUDA).view({1, 1, -1, 1});
  const auto c = torch::linspace(0, 1, 8192, torch::kCUDA).view({1, 1, 1, -1});
  const auto y = 1 + 0.5 * torch::sin(2 * M_PI * r) * torch::cos(4 * M_PI * c);
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) { return h1(out, yy); };
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("recompute+offload");
  Grads ref;
  {
    fno::OffloadedStep whole(model, settings);
    ref = run(model, [&] { return whole.forward_backward(x, y, loss); });
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  fno::offload::Offloader off;
  fno::TiledPlan plan;
  plan.tile_rows = 512;
  plan.inputs = {TilePlace::kRecompute, TilePlace::kHost, TilePlace::kHost, TilePlace::kHost};
  plan.gradient = TilePlace::kDevice;
  fno::TiledStep step(model, plan, [&](const std::string& name) {
    return std::make_unique<fno::PinnedTileStore>(off, name);
  });
  off.begin_step();
  const auto got = run(model, [&] { return step.forward_backward(x, y, loss); });
  const auto stats = off.end_step();
  MESSAGE("8256 x 8192 tiled step: ", stats.to_json());
  CHECK(rel_err(got.loss, ref.loss) <= 1e-6);
  CHECK(rel_err(fno::test::flat(got), fno::test::flat(ref)) <= 1e-5);
  for (const auto& [name, g] : ref.grads) {
    INFO("gradient of ", name);
    CHECK(rel_err(got.grads.at(name), g) <= 1e-4);
  }
}

TEST_CASE("GPU: offload auto takes tiles where no whole-grid plan fits, within the budget") {
  auto model = seed_model();
  torch::manual_seed(25);
  const auto x = torch::randn({2, 1, 512, 512}, torch::kCUDA);
  const auto y = torch::randn({2, 1, 512, 512}, torch::kCUDA) + 1;
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) { return h1(out, yy); };
  const auto ref = whole_grid(model, x, y, loss);
  const int64_t held = held_after_empty_cache();
  // One whole-grid stage of one entry needs about 7 block inputs (32 MiB each) on top.
  const int64_t budget = held + (int64_t{128} << 20);
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("auto");
  settings.gpu_memory_limit = budget;
  fno::OffloadedStep step(model, settings);
  const auto got = run(model, [&] { return step.forward_backward(x, y, loss, false); });
  MESSAGE("auto under ", budget >> 20, " MiB: ", step.plan_text());
  CHECK(step.plan_text().rfind("tiled ", 0) == 0);
  CHECK(rel_err(got.loss, ref.loss) <= 1e-6);
  CHECK(rel_err(fno::test::flat(got), fno::test::flat(ref)) <= 1e-5);
  const auto again = run(model, [&] { return step.forward_backward(x, y, loss, false); });
  CHECK(step.last_stats().peak_allocated <= budget);
  CHECK(step.last_stats().bytes_fetched_on_demand == 0);
  CHECK(rel_err(fno::test::flat(again), fno::test::flat(ref)) <= 1e-5);
  // Evaluation runs in the plan's tiles, within the budget too.
  c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
  const auto out = step.forward(x);
  CHECK(c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
            .allocated_bytes[0]
            .peak <= budget);
  CHECK(rel_err(out, model->forward(x).detach()) <= 1e-5);
}

TEST_CASE("GPU: offload auto under a search cap of 0 takes the plan estimated best, and says so") {
  auto model = seed_model();
  torch::manual_seed(25);
  const auto x = torch::randn({2, 1, 512, 512}, torch::kCUDA);
  const auto y = torch::randn({2, 1, 512, 512}, torch::kCUDA) + 1;
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) { return h1(out, yy); };
  const auto ref = whole_grid(model, x, y, loss);
  const int64_t held = held_after_empty_cache();
  // Tiles only (the whole grid's step needs over 600 MiB more), with room
  // for the estimates: no trial checks them, and the search's 2% margin is of
  // the whole budget, which grows with what earlier cases left held (1.2 GiB
  // where the whole suite runs in one process).
  const int64_t budget = held + (int64_t{192} << 20);
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("auto");
  settings.gpu_memory_limit = budget;
  settings.search_seconds = 0;  // no trial step
  fno::OffloadedStep step(model, settings);
  const auto got = run(model, [&] { return step.forward_backward(x, y, loss, false); });
  MESSAGE("auto, no trial, under ", budget >> 20, " MiB: ", step.plan_text());
  CHECK(step.plan_text().rfind("tiled ", 0) == 0);
  CHECK(step.plan_text().find("(auto: estimated, not measured: peak ") != std::string::npos);
  CHECK(step.plan_text().find("; search cut at the 0 s cap after 0 trials)") != std::string::npos);
  CHECK(rel_err(fno::test::flat(got), fno::test::flat(ref)) <= 1e-5);
  run(model, [&] { return step.forward_backward(x, y, loss, false); });
  CHECK(step.last_stats().peak_allocated <= budget);
  // A cap the whole search stays within: measured, not cut, as without a cap.
  settings.search_seconds = 1e9;
  fno::OffloadedStep full(model, settings);
  run(model, [&] { return full.forward_backward(x, y, loss, false); });
  MESSAGE("auto, searched: ", full.plan_text());
  CHECK(full.plan_text().find("(auto: measured peak ") != std::string::npos);
  CHECK(full.plan_text().find("search cut") == std::string::npos);
}

TEST_CASE("GPU: offload auto refuses in one line naming the pinned host memory tiles would need") {
  auto model = seed_model();
  torch::manual_seed(26);
  const auto x = torch::randn({2, 1, 512, 512}, torch::kCUDA);
  const auto y = torch::randn({2, 1, 512, 512}, torch::kCUDA) + 1;
  const fno::LpLoss l2(fno::LpLossOptions().d(2));
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) { return l2(out, yy); };
  const int64_t held = held_after_empty_cache();
  // Under 24 MiB more than it holds, no plan keeps one entry's 32 MiB gradient
  // between blocks on the GPU: tiles fit only with it in pinned host memory,
  // which a 1 MiB offload.host_memory_limit does not give.
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("auto");
  settings.gpu_memory_limit = held + (int64_t{24} << 20);
  settings.options.host_memory_limit(int64_t{1} << 20);
  fno::OffloadedStep step(model, settings);
  std::string message;
  try {
    step.forward_backward(x, y, loss, false);
  } catch (const fno::offload::BudgetError& e) {
    message = e.what();
  }
  MESSAGE("refusal: ", message);
  CHECK(message.find("pinned host memory") != std::string::npos);
  CHECK(message.find("offload.host_memory_limit gives") != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
  for (const auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("GPU: out-of-memory advice names auto where no fixed policy fits") {
  auto model = seed_model();
  const auto x = torch::randn({2, 1, 512, 512}, torch::kCUDA);
  const int64_t held = held_after_empty_cache();
  // Every fixed policy needs a whole-grid stage (about 7 block inputs of 64 MiB
  // at batch 2) on the GPU; auto trains it in tiles. The advice plans within
  // 90% of the limit, so the limit leaves 128 MiB above what the process holds
  // after that margin. What it holds grows with the tests run before it in this
  // process (LibTorch keeps a cuBLAS workspace for each handle and stream that
  // ran a product, and each graphed test captures on a stream of its own;
  // FNO_TEST_CUDA_MEMORY=1 prints them); a limit of held + 128 MiB left the
  // tiles short once it did.
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("none");
  settings.gpu_memory_limit =
      static_cast<int64_t>(static_cast<double>(held + (int64_t{128} << 20)) / 0.9);
  fno::OffloadedStep step(model, settings);
  const auto advice = fno::word_memory_advice(step.out_of_memory_advice(x), settings.policy);
  MESSAGE("advice: ", advice);
  CHECK(advice.find("no fixed policy is estimated to fit") != std::string::npos);
  CHECK(advice.find("--offload auto") != std::string::npos);
  CHECK(advice.find('\n') == std::string::npos);
}

TEST_CASE(
    "GPU: evaluation at another grid under offload.gpu_memory_limit runs a plan for that grid") {
  auto model = seed_model();
  torch::manual_seed(26);
  const auto x = torch::randn({4, 1, 64, 64}, torch::kCUDA);
  const auto y = torch::randn({4, 1, 64, 64}, torch::kCUDA) + 1;
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const Loss loss = [&](const at::Tensor& out, const at::Tensor& yy) { return h1(out, yy); };
  // (512 MiB beside what is held: under one 2048x2048 block input's two
  // copies, so the forward remakes each block input per tile)
  const int64_t held = held_after_empty_cache();
  const int64_t budget = held + (int64_t{512} << 20);
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("auto");
  settings.gpu_memory_limit = budget;
  fno::OffloadedStep step(model, settings);
  run(model, [&] { return step.forward_backward(x, y, loss, false); });  // the plan at 64x64
  MESSAGE("training plan at 64x64 under ", budget >> 20, " MiB: ", step.plan_text());
  // At 2048x2048 one sample's whole-grid forward is over the whole budget (at
  // 1024x1024 it was not, once the tests before this one left 1.1 GiB held):
  // the evaluation's forward takes tiles chosen for that grid, not the 64x64 plan.
  const auto big = torch::randn({2, 1, 2048, 2048}, torch::kCUDA);
  REQUIRE(fno::whole_grid_forward_bytes(model, big.sizes(), 1, 4) > budget - held);
  const auto plan = step.forward_plan(big);
  MESSAGE("evaluation at 2048x2048: ", plan.text);
  REQUIRE(plan.tiled);
  CHECK(plan.micro == 1);
  CHECK(step.forward_plan(x).text.find("training plan") != std::string::npos);
  torch::NoGradGuard no_grad;
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
  const auto out = step.forward(big);
  const int64_t peak = static_cast<int64_t>(
      c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
          .allocated_bytes[0]
          .peak);
  MESSAGE("peak ", peak >> 20, " MiB of ", budget >> 20, " MiB");
  CHECK(peak <= budget);
  CHECK(rel_err(out, model->forward(big)) <= 1e-5);
  // A budget under the floor is refused in one line naming it.
  fno::OffloadSettings tight = settings;
  tight.gpu_memory_limit = held_after_empty_cache() + (int64_t{1} << 20);
  fno::OffloadedStep small(model, tight);
  CHECK_THROWS_WITH_AS(small.forward(big), doctest::Contains("is under the floor"),
                       fno::ForwardBudgetError);
}
