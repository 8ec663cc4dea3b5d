// The forward under a plan (fno_engine/forward_plan.h) on the CPU: the
// planner's choices for a budget (the whole grid, micro-batches, tiles of one
// sample; planned as for a GPU where the budget applies) and its refusals in
// neutral words; forward_under_plan equal to the whole-grid forward under
// each; and OffloadedStep::forward, which evaluation takes, at the training
// grid and at a larger one. tests/test_gpu_tiled.cpp runs the GPU budgets.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno_engine/forward_plan.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/tiled_runner.h>
#include <fno_offload/planner.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

double rel_max(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

fno::FNO small_model(int64_t layers = 3) {
  torch::manual_seed(11);
  fno::FNO model(fno::FNOOptions({8, 8}, 1, 1, 16).n_layers(layers));
  model->eval();
  return model;
}

torch::Tensor whole(fno::FNO& model, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  return model->forward(x);
}

const torch::Device kGpu(torch::kCUDA, 0);  // planned for only: nothing runs there

}  // namespace

TEST_CASE("the forward planner: whole grid on the CPU, micro-batches and tiles within a budget") {
  auto model = small_model();
  const std::vector<int64_t> shape{8, 1, 64, 64};
  const int64_t one = fno::whole_grid_forward_bytes(model, shape, 1, 4);
  CHECK(fno::whole_grid_forward_bytes(model, shape, 2, 4) > one);
  // The CPU: the whole grid, all at once, with or without a GPU limit.
  for (const int64_t limit : {int64_t{0}, one / 2}) {
    const auto p = fno::choose_forward_plan(
        model, shape, fno::ForwardBudget().gpu_memory_limit(limit), torch::kCPU, 4);
    CHECK(p.micro == 8);
    CHECK_FALSE(p.tiled);
    CHECK(p.text.find("whole grid, batches of 8") != std::string::npos);
  }
  // A GPU: the largest halved batch whose whole grid fits ...
  const auto two = fno::whole_grid_forward_bytes(model, shape, 2, 4);
  auto p = fno::choose_forward_plan(model, shape, fno::ForwardBudget().gpu_memory_limit(two + 1),
                                    kGpu, 4);
  CHECK(p.micro == 2);
  CHECK_FALSE(p.tiled);
  // ... else tiles of one sample within the budget, no block input on the host.
  p = fno::choose_forward_plan(model, shape, fno::ForwardBudget().gpu_memory_limit(one - 1), kGpu,
                               4);
  REQUIRE(p.tiled);
  CHECK(p.micro == 1);
  CHECK(p.tiled->peak_bytes <= one - 1);
  for (const auto place : p.tiled->plan.inputs) CHECK(place != fno::TilePlace::kHost);
  // Forced tiles, whatever the device.
  p = fno::choose_forward_plan(model, shape, fno::ForwardBudget().tile_rows(8), torch::kCPU, 4);
  REQUIRE(p.tiled);
  CHECK(p.tiled->plan.tile_rows == 8);
  CHECK(p.micro == 8);
}

TEST_CASE("the forward planner refuses in one neutral line that names the limit and the floor") {
  auto model = small_model();
  try {
    fno::choose_forward_plan(model, {1, 1, 64, 64}, fno::ForwardBudget().gpu_memory_limit(1000),
                             kGpu, 4);
    FAIL("no refusal");
  } catch (const fno::ForwardBudgetError& e) {
    const std::string what = e.what();
    CHECK(e.limit() == fno::ForwardBudgetError::Limit::kGpuMemory);
    CHECK(what.rfind("GPU memory limit 1000 B is under the floor: tiles of one sample need about",
                     0) == 0);
    CHECK(e.detail().rfind(fno::offload::format_bytes(1000), 0) == 0);
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find("--") == std::string::npos);  // no program's flag
  }
  // Streamed, on the CPU: the host limit.
  try {
    fno::choose_streamed_plan(model, {1, 1, 64, 64},
                              fno::ForwardBudget().host_memory_limit(1000).tile_rows(8),
                              torch::kCPU, 0);
    FAIL("no refusal");
  } catch (const fno::ForwardBudgetError& e) {
    CHECK(e.limit() == fno::ForwardBudgetError::Limit::kHostMemory);
    CHECK(std::string(e.what()).rfind(
              "host memory limit 1000 B is under the floor: streaming one sample in tiles of 8 "
              "rows needs about",
              0) == 0);
  }
  // Tiles forced on a model that cannot run in them.
  torch::manual_seed(1);
  fno::FNO one_d(fno::FNOOptions({8}, 1, 1, 16));
  CHECK_THROWS_WITH_AS(fno::choose_forward_plan(one_d, {2, 1, 64},
                                                fno::ForwardBudget().tile_rows(8), torch::kCPU, 4),
                       doctest::Contains("forced tile rows: this model cannot run in tiles"),
                       fno::ForwardBudgetError);
}

TEST_CASE("a forward under a plan chosen for a larger grid within a small budget is exact") {
  auto model = small_model();
  torch::manual_seed(12);
  const auto x = torch::randn({4, 1, 64, 48});
  const auto want = whole(model, x);
  fno::TiledRunner tiles(model, nullptr);
  const int64_t one = fno::whole_grid_forward_bytes(model, x.sizes(), 1, 4);
  // Micro-batches of 2, tiles of one sample (planned as for a GPU, run here),
  // forced tiles of 7 rows (a short last tile).
  struct Case {
    fno::ForwardBudget budget;
    int64_t micro;
    int64_t tile_rows;  // 0: the whole grid; -1: the plan's
  };
  for (const auto& c : {Case{fno::ForwardBudget().gpu_memory_limit(
                                 fno::whole_grid_forward_bytes(model, x.sizes(), 2, 4)),
                             2, 0},
                        Case{fno::ForwardBudget().gpu_memory_limit(one - 1), 1, -1},
                        Case{fno::ForwardBudget().tile_rows(7), 4, 7}}) {
    const auto plan = fno::choose_forward_plan(model, x.sizes(), c.budget, kGpu, 4);
    CAPTURE(plan.text);
    CHECK(plan.micro == c.micro);
    CHECK(static_cast<bool>(plan.tiled) == (c.tile_rows != 0));
    if (plan.tiled && c.tile_rows > 0) CHECK(plan.tiled->plan.tile_rows == c.tile_rows);
    if (plan.tiled) CHECK(plan.tiled->plan.tile_rows < x.size(2));
    const auto got = fno::forward_under_plan(model, plan, x, plan.tiled ? &tiles : nullptr);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(rel_max(got, want) <= 1e-5);
  }
}

TEST_CASE("OffloadedStep::forward (evaluation) at the training grid and at a larger one (CPU)") {
  auto model = small_model(2);
  fno::OffloadSettings settings;
  settings.policy = fno::offload::Policy::of(fno::offload::Policy::Kind::kNone);
  settings.micro_batches = 2;
  settings.gpu_memory_limit = int64_t{1} << 20;  // under any 32x32 whole grid: the CPU ignores it
  fno::OffloadedStep step(model, settings);
  // Before any step: the whole grid.
  const auto x32 = torch::randn({6, 1, 32, 32});
  CHECK(step.forward_plan(x32).micro == 6);
  // A training step at 16x16 makes the plan (two micro-batches of 2 samples).
  model->train();
  const fno::LpLoss l2(fno::LpLossOptions().d(2).p(2));
  const auto x16 = torch::randn({4, 1, 16, 16}), y16 = torch::randn({4, 1, 16, 16});
  step.forward_backward(
      x16, y16, [&](const at::Tensor& out, const at::Tensor& y) { return l2(out, y); }, true);
  model->eval();
  auto p = step.forward_plan(x16);
  CHECK(p.micro == 4);  // (policy none: its micro-batches are the step's, not the forward's)
  CHECK_FALSE(p.tiled);
  CHECK(p.text.find("training plan") != std::string::npos);
  CHECK(rel_max(step.forward(x16), whole(model, x16)) <= 1e-6);
  // Another grid on the CPU: the whole grid, all of it at once.
  p = step.forward_plan(x32);
  CHECK(p.micro == 6);
  CHECK_FALSE(p.tiled);
  CHECK(rel_max(step.forward(x32), whole(model, x32)) <= 1e-6);
}
