// CUDA graphs of the forward under a plan (label "gpu", issue 49;
// fno_engine/forward_graphs.h): the graphed forward against the eager one in
// fp32 (to 1e-6, reporting whether bitwise equal), replays of other inputs in
// the same static buffers, outputs that outlive the next replay (a rollout
// feeds them back), micro-batches with a partial last one run eagerly, auto's
// measured rule on a small grid, bf16, and fno_predict with --cuda-graphs on
// against off. Without a GPU the binary skips (tests/test_gpu.cpp).
#include <fno/fno.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>
#include <fno_engine/forward_graphs.h>
#include <fno_engine/forward_plan.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "golden.h"

using fno::test::out_path;
using fno::test::rel_err;

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

fno::FNO gpu_model(torch::Dtype compute = torch::kFloat) {
  torch::manual_seed(5);
  fno::FNO model(
      fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2).compute_dtype(compute));
  model->to(kCuda);
  model->eval();
  return model;
}

torch::Tensor eager(fno::FNO& model, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  return model->forward(x);
}

// rel_err within tol; says whether the two are bitwise equal.
void check_equal(const torch::Tensor& got, const torch::Tensor& want, double tol,
                 const std::string& what) {
  const bool bitwise = torch::equal(got, want);
  MESSAGE(what, ": ", std::string(bitwise ? "bitwise equal" : "not bitwise equal"),
          ", relative difference ", rel_err(got, want));
  CHECK(rel_err(got, want) <= tol);
}

}  // namespace

TEST_CASE("GPU forward graphs: the replayed forward equals the eager one, input after input") {
  auto model = gpu_model();
  std::vector<torch::Tensor> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(torch::randn({8, 1, 64, 64}, kCuda));
  fno::ForwardGraphs graphs(model, kCuda, fno::CudaGraphs::kOn);
  // on: one eager warm-up forward, then the capture (which replays), then replays.
  std::vector<torch::Tensor> outs;
  for (const auto& x : xs) outs.push_back(graphs.forward(x));
  CHECK(graphs.graphs() == 1);
  CHECK(graphs.replayed() == 3);
  CHECK(graphs.eager() == 1);
  // Each output is its own tensor: the later replays (other inputs copied
  // into the same static buffers) left the earlier outputs as they were.
  for (size_t i = 0; i < xs.size(); ++i) {
    check_equal(outs[i], eager(model, xs[i]), 1e-6, "fp32 forward " + std::to_string(i));
  }
  // The first input again, replayed into the same buffers.
  check_equal(graphs.forward(xs[0]), eager(model, xs[0]), 1e-6, "fp32 forward 0, replayed");
  CHECK(graphs.replayed() == 4);
  // A rollout: each output fed back as the next input.
  auto rolled = xs[1], want = xs[1];
  for (int t = 0; t < 5; ++t) {
    rolled = graphs.forward(rolled);
    want = eager(model, want);
  }
  check_equal(rolled, want, 1e-6, "fp32 rollout of 5 steps");
  // A partial batch: a shape seen once runs eagerly, no graph made.
  const auto part = torch::randn({3, 1, 64, 64}, kCuda);
  check_equal(graphs.forward(part), eager(model, part), 1e-6, "fp32 partial batch");
  CHECK(graphs.graphs() == 1);
  CHECK(graphs.summary().rfind("CUDA graphs: 1 captured, 9 of 11 forwards replayed", 0) == 0);
}

TEST_CASE("GPU forward graphs: a plan's micro-batches, auto's rule on a small grid, bf16") {
  auto model = gpu_model();
  fno::ForwardPlan plan;
  plan.micro = 4;
  plan.text = "whole grid, micro-batches of 4";
  auto graphs = fno::use_forward_graphs(model, plan, fno::CudaGraphs::kAuto, kCuda);
  REQUIRE(graphs != nullptr);
  CHECK(plan.graphed);
  CHECK(plan.text ==
        "whole grid, micro-batches of 4; CUDA graphs auto (a micro-batch shape whose "
        "forward takes at most 20 ms)");
  const auto x = torch::randn({10, 1, 64, 64}, kCuda);  // micro-batches of 4, 4 and 2
  const auto want = eager(model, x);
  for (int pass = 0; pass < 3; ++pass) {
    check_equal(fno::forward_under_plan(model, plan, x, nullptr, graphs.get()), want, 1e-6,
                "fp32 micro-batches, pass " + std::to_string(pass));
  }
  // auto: each shape's first two forwards eager (the second timed: a 64^2
  // forward of 4 samples takes well under 20 ms), its third captured: [4, ...]
  // in the second pass, [2, ...] in the third.
  CHECK(graphs->graphs() == 2);
  CHECK(graphs->replayed() == 5);
  INFO(graphs->summary());
  // off: no runner, the plan says so on a GPU.
  fno::ForwardPlan off = plan;
  off.text = "whole grid";
  CHECK(fno::use_forward_graphs(model, off, fno::CudaGraphs::kOff, kCuda) == nullptr);
  CHECK_FALSE(off.graphed);
  CHECK(off.text == "whole grid; CUDA graphs off");

  auto half = gpu_model(torch::kBFloat16);
  fno::ForwardGraphs bf16(half, kCuda, fno::CudaGraphs::kOn);
  for (int i = 0; i < 3; ++i) {
    const auto xb = torch::randn({4, 1, 64, 64}, kCuda);
    const auto got = bf16.forward(xb);
    check_equal(got, eager(half, xb), 1e-3, "bf16 forward " + std::to_string(i));
  }
  CHECK(bf16.replayed() == 2);
}

TEST_CASE("GPU forward graphs: fno_predict --cuda-graphs on equals off, and says so in its plan") {
  const std::string data = std::string(FNO_SOURCE_DIR) + "/data/darcy/darcy_test_32.pt";
  const auto dir = out_path("gpu_forward_graphs_run");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto cfg = fno::parse_config(R"(model:
  n_modes: [8, 8]
  hidden_channels: 32
data:
  train_file: )" + std::string(FNO_SOURCE_DIR) +
                                         R"(/data/darcy/darcy_train_16.pt
  encode_output: false
device:
  name: cuda
)",
                                     "graphs.yaml");
  std::ofstream(dir + "/config.yaml") << cfg.resolved_yaml;
  torch::manual_seed(3);
  fno::FNO model(cfg.model);
  fno::save_tensor_dict(fno::state_dict(*model), dir + "/model.pt");
  torch::Tensor pred[2];
  for (int i = 0; i < 2; ++i) {
    const std::string mode = i == 0 ? "off" : "on";
    fno::PredictOptions o;
    o.run_dir = dir;
    o.input = data;
    o.count = 9;  // batches of 2, 2, 2, 2 and 1
    o.batch_size = 2;
    o.device = "cuda";
    o.cuda_graphs = mode;
    o.progress = "none";
    o.out = out_path("gpu_forward_graphs_" + mode + ".h5");
    std::filesystem::remove(o.out);
    const auto r = fno::predict(o);
    INFO(r.plan);
    CHECK(r.plan.find("; CUDA graphs " + mode) != std::string::npos);
    if (i == 1)
      CHECK(r.plan.find("CUDA graphs: 1 captured, 3 of 5 forwards replayed") != std::string::npos);
    pred[i] = fno::data::load_hdf5(o.out, fno::data::LoadOptions().x_key("pred").y_key("pred")).x;
  }
  REQUIRE(pred[0].sizes() == pred[1].sizes());
  check_equal(pred[1], pred[0], 1e-6, "fno_predict fp32, graphs on against off");
}
