// CUDA graphs of the forward under a plan (fno_engine/forward_graphs.h), what
// a CPU can check: the decision and its words in the plan line for each
// --cuda-graphs mode, the CPU's forward unchanged by them, the refusals of a
// graphed plan without its runner; and fno_predict's plan on the CPU, with
// --cuda-graphs on said not to apply and the prediction unchanged.
// tests/test_gpu_forward_graphs.cpp runs the graphs.
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

#include "golden.h"

using fno::test::out_path;

namespace {

fno::FNO small_model() {
  torch::manual_seed(11);
  fno::FNO model(fno::FNOOptions({8, 8}, 1, 1, 16).n_layers(2));
  model->eval();
  return model;
}

const std::string kNoCuda = fno::cuda_graphs_built()
                                ? "the device is cpu (graphs need a CUDA device)"
                                : "this build has no CUDA";

}  // namespace

TEST_CASE("forward graphs on the CPU: auto and off leave the plan as it was, on says why not") {
  auto model = small_model();
  const auto x = torch::randn({4, 1, 32, 32});
  torch::Tensor want;
  {
    torch::NoGradGuard no_grad;
    want = model->forward(x);
  }
  const auto chosen = fno::choose_forward_plan(model, x.sizes(), {}, torch::kCPU, 4);
  for (const auto mode : {fno::CudaGraphs::kAuto, fno::CudaGraphs::kOff, fno::CudaGraphs::kOn}) {
    CAPTURE(fno::to_string(mode));
    auto plan = chosen;
    const auto graphs = fno::use_forward_graphs(model, plan, mode, torch::kCPU);
    CHECK(graphs == nullptr);
    CHECK_FALSE(plan.graphed);
    if (mode == fno::CudaGraphs::kOn) {
      CHECK(plan.text == chosen.text + "; CUDA graphs on, not used: " + kNoCuda);
    } else {
      CHECK(plan.text == chosen.text);
    }
    CHECK(torch::equal(fno::forward_under_plan(model, plan, x, nullptr, graphs.get()), want));
  }
  CHECK(fno::streamed_graphs_text(fno::CudaGraphs::kOn) ==
        "; CUDA graphs on, not used: a streamed forward runs in tiles");
  CHECK(fno::streamed_graphs_text(fno::CudaGraphs::kAuto).empty());
  CHECK(fno::streamed_graphs_text(fno::CudaGraphs::kOff).empty());
}

TEST_CASE("forward graphs: planned for a GPU, tiles run eagerly and off is said; refusals") {
  auto model = small_model();
  const torch::Device gpu(torch::kCUDA, 0);  // planned for only: nothing runs there
  auto tiled =
      fno::choose_forward_plan(model, {2, 1, 32, 32}, fno::ForwardBudget().tile_rows(8), gpu, 4);
  REQUIRE(tiled.tiled);
  const auto text = tiled.text;
  CHECK(fno::use_forward_graphs(model, tiled, fno::CudaGraphs::kAuto, gpu) == nullptr);
  CHECK_FALSE(tiled.graphed);
  CHECK(tiled.text == text + "; CUDA graphs auto, not used: " +
                          (fno::cuda_graphs_built() ? std::string("a tiled forward runs eagerly")
                                                    : std::string("this build has no CUDA")));
  auto whole = fno::choose_forward_plan(model, {2, 1, 32, 32}, {}, gpu, 4);
  const auto whole_text = whole.text;
  CHECK(fno::use_forward_graphs(model, whole, fno::CudaGraphs::kOff, gpu) == nullptr);
  CHECK(whole.text == whole_text + "; CUDA graphs off");
  // A graphed plan without its runner is refused, naming the plan.
  whole.graphed = true;
  CHECK_THROWS_WITH_AS(fno::forward_under_plan(model, whole, torch::randn({2, 1, 32, 32}), nullptr),
                       doctest::Contains("a graphed plan needs its ForwardGraphs"), c10::Error);
  // The runner needs CUDA, and a mode other than off.
  CHECK_THROWS_AS(fno::ForwardGraphs(model, torch::kCPU, fno::CudaGraphs::kOn),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(fno::ForwardGraphs(model, torch::kCPU, fno::CudaGraphs::kOff),
                       "ForwardGraphs: CUDA graphs are off", std::invalid_argument);
}

TEST_CASE("predict on the CPU: --cuda-graphs leaves the prediction as it was; on says why not") {
  const std::string data = std::string(FNO_SOURCE_DIR) + "/data/darcy/darcy_test_32.pt";
  const auto dir = out_path("forward_graphs_run");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto cfg = fno::parse_config(R"(model:
  n_modes: [8, 8]
  hidden_channels: 8
  n_layers: 2
data:
  train_file: )" + std::string(FNO_SOURCE_DIR) +
                                         R"(/data/darcy/darcy_train_16.pt
  encode_output: false
device:
  name: cpu
)",
                                     "graphs.yaml");
  std::ofstream(dir + "/config.yaml") << cfg.resolved_yaml;
  torch::manual_seed(3);
  fno::FNO model(cfg.model);
  fno::save_tensor_dict(fno::state_dict(*model), dir + "/model.pt");
  std::string plans[3];
  torch::Tensor pred[3];
  const char* modes[] = {"auto", "off", "on"};
  for (int i = 0; i < 3; ++i) {
    fno::PredictOptions o;
    o.run_dir = dir;
    o.input = data;
    o.count = 5;
    o.batch_size = 2;
    o.device = "cpu";
    o.cuda_graphs = modes[i];
    o.progress = "none";
    o.out = out_path(std::string("forward_graphs_") + modes[i] + ".h5");
    std::filesystem::remove(o.out);
    plans[i] = fno::predict(o).plan;
    pred[i] = fno::data::load_hdf5(o.out, fno::data::LoadOptions().x_key("pred").y_key("pred")).x;
  }
  CHECK(plans[0] == plans[1]);
  CHECK(plans[0].find("CUDA graphs") == std::string::npos);
  CHECK(plans[2] == plans[0] + "; CUDA graphs on, not used: " + kNoCuda);
  CHECK(torch::equal(pred[0], pred[1]));
  CHECK(torch::equal(pred[0], pred[2]));
}
