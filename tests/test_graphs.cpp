// CUDA graphs of the step (issue 28), what a CPU can check: training.cuda_graphs
// and its one-line errors, the decision and its one line, AdamW's device step
// (learning rate and step count in tensors, CPU tensors here) against its host
// step, fp16's device-side skip, and a run asking for graphs on the CPU
// training eagerly with one line. The graphs themselves: test_gpu_graphs.cpp.
#include <fno/optim.h>
#include <fno/precision.h>
#include <fno_train/config.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_train/train_step.h>
#include <fno_train/trainer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <utility>

#include "golden.h"
#include "stderr_capture.h"

using fno::test::count_of;
using fno::test::out_path;
using fno::test::rel_err;
using fno::test::StderrCapture;

namespace {

const std::string kValid = R"(model:
  n_modes: [16, 16]
data:
  train_file: train.pt
training:
  epochs: 3
)";

std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    fno::parse_config(yaml, "cfg.yaml", overrides);
  } catch (const fno::ConfigError& e) {
    return e.what();
  }
  return "";
}

// Real and complex parameters with a few steps' gradients.
struct Params {
  torch::Tensor real, cplx;
  std::vector<torch::Tensor> list() const { return {real, cplx}; }
};

Params make_params() {
  torch::manual_seed(4);
  return {torch::randn({5, 3}).requires_grad_(true),
          torch::randn({4, 2}, torch::kComplexFloat).requires_grad_(true)};
}

void set_grads(Params& p, int step) {
  torch::manual_seed(100 + step);
  p.real.mutable_grad() = torch::randn({5, 3});
  p.cplx.mutable_grad() = torch::randn({4, 2}, torch::kComplexFloat);
}

}  // namespace

TEST_CASE(
    "training.cuda_graphs: auto by default, auto|on|off, one-line errors naming key and value") {
  CHECK(fno::parse_config(kValid, "cfg.yaml").training.cuda_graphs == fno::CudaGraphs::kAuto);
  for (const auto mode : {fno::CudaGraphs::kAuto, fno::CudaGraphs::kOn, fno::CudaGraphs::kOff}) {
    const auto text = fno::to_string(mode);
    INFO("mode ", text);
    CHECK(fno::parse_config(kValid + "  cuda_graphs: " + text + "\n", "cfg.yaml")
              .training.cuda_graphs == mode);
    CHECK(fno::parse_config(kValid, "cfg.yaml", {"training.cuda_graphs=" + text})
              .training.cuda_graphs == mode);
    CHECK(fno::parse_cuda_graphs(text) == mode);
  }
  const auto msg = config_error(kValid + "  cuda_graphs: sometimes\n");
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.find("cfg.yaml:7: training.cuda_graphs: unknown value 'sometimes' (expected one of: "
                 "auto, on, off)") != std::string::npos);
  const auto set = config_error(kValid, {"training.cuda_graphs=true"});
  CHECK(set.find("--set training.cuda_graphs=true: training.cuda_graphs: unknown value 'true'") !=
        std::string::npos);
  CHECK(config_error(kValid + "  cuda_graphs: [on]\n")
            .find("training.cuda_graphs: expected a string") != std::string::npos);
  CHECK_THROWS_WITH_AS(fno::parse_cuda_graphs("yes"),
                       "unknown cuda_graphs setting 'yes' (expected auto, on or off)",
                       std::invalid_argument);
  // The resolved config names it, quoted (YAML 1.1 readers such as PyYAML take a plain
  // off for false), and reads back.
  const auto cfg = fno::parse_config(kValid + "  cuda_graphs: off\n", "cfg.yaml");
  CHECK(cfg.resolved_yaml.find("cuda_graphs: \"off\"\n") != std::string::npos);
  CHECK(fno::parse_config(cfg.resolved_yaml, "resolved.yaml").training.cuda_graphs ==
        fno::CudaGraphs::kOff);
}

TEST_CASE("decide_cuda_graphs: where graphs work, and one line when they cannot") {
  fno::GraphConditions c;
  const c10::Device gpu(c10::kCUDA, 0);
  // The CPU: on says why, auto quietly trains eagerly, off says nothing.
  c.mode = fno::CudaGraphs::kOn;
  auto d = fno::decide_cuda_graphs(c);
  CHECK_FALSE(d.use);
  CHECK(d.message.find('\n') == std::string::npos);
  CHECK(d.message.find("training.cuda_graphs on: ") == 0);
  CHECK(d.message.find("steps run eagerly") != std::string::npos);
  CHECK(d.message.find(fno::cuda_graphs_built() ? "the device is cpu" : "this build has no CUDA") !=
        std::string::npos);
  c.mode = fno::CudaGraphs::kAuto;
  d = fno::decide_cuda_graphs(c);
  CHECK_FALSE(d.use);
  CHECK(d.message.empty());
  c.mode = fno::CudaGraphs::kOff;
  c.device = gpu;
  d = fno::decide_cuda_graphs(c);
  CHECK_FALSE(d.use);
  CHECK(d.message.empty());
  if (!fno::cuda_graphs_built()) return;
  // A CUDA device (named, not used).
  c.mode = fno::CudaGraphs::kAuto;
  CHECK(fno::decide_cuda_graphs(c).use);
  CHECK(fno::decide_cuda_graphs(c).message.empty());
  for (const auto mode : {fno::CudaGraphs::kAuto, fno::CudaGraphs::kOn}) {
    c.mode = mode;
    c.offload_policy = fno::offload::parse_policy("recompute+offload");
    d = fno::decide_cuda_graphs(c);
    CHECK_FALSE(d.use);
    CHECK(d.message.find("offload policy 'recompute+offload'") != std::string::npos);
    c.offload_policy = fno::offload::Policy{};
    c.micro_batches = 4;
    d = fno::decide_cuda_graphs(c);
    CHECK_FALSE(d.use);
    CHECK(d.message.find("4 micro-batches") != std::string::npos);
    c.micro_batches = 1;
    // Several ranks: on NCCL the all-reduce is captured with the step; on
    // Gloo it cannot be.
    c.world_size = 2;
    c.key = "--cuda-graphs";
    c.backend = "gloo";
    d = fno::decide_cuda_graphs(c);
    CHECK_FALSE(d.use);
    CHECK(d.message.find("--cuda-graphs " + fno::to_string(mode) +
                         ": 2 ranks on the gloo backend") == 0);
    CHECK(d.message.find('\n') == std::string::npos);
    c.backend = "nccl";
    d = fno::decide_cuda_graphs(c);
    CHECK(d.use);
    CHECK(d.message.empty());
    c.world_size = 1;
    c.backend.clear();
    c.key = "training.cuda_graphs";
  }
}

TEST_CASE("AdamW's device step (lr and step count in tensors) gives the host step's numbers") {
  for (const auto& [wd, torch_adam] : {std::pair{0.0, false}, std::pair{1e-4, false},
                                       std::pair{0.0, true}, std::pair{1e-2, true}}) {
    INFO("weight decay ", wd, ", torch_adam ", torch_adam);
    auto host = make_params();
    auto dev = make_params();
    const auto options = fno::AdamWOptions(8e-3).weight_decay(wd).torch_adam(torch_adam);
    fno::AdamW a(host.list(), options), b(dev.list(), options);
    fno::CosineAnnealingLR sa(a, 5), sb(b, 5);
    b.set_device_step(true);
    CHECK(b.device_step());
    for (int t = 0; t < 12; ++t) {
      set_grads(host, t);
      set_grads(dev, t);
      a.step();
      b.step();  // the device step, as set_device_step(true) made it
      sa.step();
      sb.step();  // changes the lr between steps: written to the device at the next step
    }
    CHECK(rel_err(dev.real, host.real) <= 1e-6);
    CHECK(rel_err(dev.cplx, host.cplx) <= 1e-6);
    // The state dict keeps its format: the same keys, int64 step counts.
    const auto sd_a = a.state_dict(), sd_b = b.state_dict();
    CHECK(sd_a.size() == sd_b.size());
    for (const auto& item : sd_a) {
      INFO("key ", item.key());
      const auto* other = sd_b.find(item.key());
      REQUIRE(other != nullptr);
      CHECK((other->scalar_type() == item.value().scalar_type()));
      CHECK((other->sizes() == item.value().sizes()));
      CHECK(rel_err(*other, item.value()) <= 1e-6);
    }
    CHECK(sd_b["state.0.step"].item<int64_t>() == 12);
    // Loading in device mode restores counts and moments in place; back on the
    // host the counts are the device's.
    b.load_state_dict(sd_a);
    b.set_device_step(false);
    CHECK(b.state_dict()["state.1.step"].item<int64_t>() == 12);
  }
}

TEST_CASE("AdamW's device step skips on keep = 0, as the host's skipped step") {
  for (const bool torch_adam : {false, true}) {
    INFO("torch_adam ", torch_adam);
    auto host = make_params();
    auto dev = make_params();
    const auto options = fno::AdamWOptions(8e-3).weight_decay(1e-2).torch_adam(torch_adam);
    fno::AdamW a(host.list(), options);
    fno::AdamW b(dev.list(), options);
    b.set_device_step(true);
    const auto keep = torch::ones({1});
    const auto skip = torch::zeros({1});
    // The very first step skipped (step count 0 stays finite), then steps, a
    // skip with non-finite gradients, steps.
    for (int t = 0; t < 8; ++t) {
      INFO("step ", t);
      const bool skipped = t == 0 || t == 4;
      set_grads(dev, t);
      if (skipped) {
        dev.real.mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
        dev.cplx.mutable_grad()[1][1] = std::numeric_limits<float>::quiet_NaN();
        const auto before_real = dev.real.detach().clone(), before_cplx = dev.cplx.detach().clone();
        b.step_on_device(skip);
        CHECK(torch::equal(dev.real, before_real));
        CHECK(torch::equal(dev.cplx, before_cplx));
        continue;
      }
      set_grads(host, t);
      a.step();
      b.step_on_device(keep);
    }
    CHECK(rel_err(dev.real, host.real) <= 1e-6);
    CHECK(rel_err(dev.cplx, host.cplx) <= 1e-6);
    CHECK(b.state_dict()["state.0.step"].item<int64_t>() == 6);
    const auto m_a = a.state_dict()["state.1.exp_avg"], m_b = b.state_dict()["state.1.exp_avg"];
    CHECK(rel_err(m_b, m_a) <= 1e-6);
  }
}

TEST_CASE("AdamW's device step needs one step count per group") {
  auto p = make_params();
  fno::AdamW a(p.list());
  set_grads(p, 0);
  a.step();
  p.cplx.mutable_grad() = torch::Tensor();  // the complex one sits this step out
  set_grads(p, 1);
  p.cplx.mutable_grad() = torch::Tensor();
  a.step();
  CHECK_THROWS_WITH_AS(a.set_device_step(true),
                       doctest::Contains("group 0 have different step counts (2 and 1)"),
                       std::invalid_argument);
  CHECK_FALSE(a.device_step());
}

TEST_CASE("GradScaler::unscale_on_device: the verdict and the skip count stay on the device") {
  auto w = torch::zeros({3}, torch::requires_grad());
  fno::GradScaler scaler(fno::GradScalerOptions().init_scale(1024.0));
  w.mutable_grad() = torch::full({3}, 2048.0f);
  auto keep = scaler.unscale_on_device({w});
  CHECK(keep.item<float>() == 1.0f);
  CHECK(torch::allclose(w.grad(), torch::full({3}, 2.0f)));
  scaler.update();
  w.mutable_grad() = torch::full({3}, std::numeric_limits<float>::infinity());
  keep = scaler.unscale_on_device({w});
  CHECK(keep.item<float>() == 0.0f);
  scaler.update();
  CHECK(scaler.scale_value() == 512.0);
  CHECK(scaler.skipped_steps() == 1);
  // The checkpoint's count adds the device's.
  for (const auto& [k, v] : scaler.state()) {
    if (k == "skipped") CHECK(v.item<int64_t>() == 1);
  }
}

TEST_CASE("CUDA graphs asked for on the CPU: eager steps, one line, the same results") {
  // clang-format off
  const std::string config = R"(model:
  n_modes: [8, 8]
  hidden_channels: 8
  n_layers: 2
data:
  train_file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_train_16.pt
  n_train: 40
  batch_size: 16
  test:
    - {file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_test_16.pt, n_samples: 8, batch_size: 8}
  n_predictions: 0
training:
  epochs: 2
device:
  name: cpu
output:
  progress: none
)";
  // clang-format on
  std::map<std::string, double> metrics[2];
  std::string said[2];
  const char* modes[] = {"off", "on"};
  for (int i = 0; i < 2; ++i) {
    const auto dir = out_path(std::string("graphs_cpu_") + modes[i]);
    std::system(("rm -rf '" + dir + "'").c_str());
    StderrCapture capture(dir + ".stderr");
    fno::Trainer trainer(
        fno::parse_config(config, "cfg.yaml", {std::string("training.cuda_graphs=") + modes[i]}),
        dir);
    metrics[i] = trainer.train();
    said[i] = capture.text();
  }
  INFO("stderr with graphs on: ", said[1]);
  CHECK(count_of(said[0], "cuda_graphs") == 0);
  CHECK(count_of(said[1], "training.cuda_graphs on") == 1);
  CHECK(count_of(said[1], "\n") == 1);
  CHECK(metrics[0] == metrics[1]);

  // TrainStep itself refuses graphs on the CPU, naming the device.
  fno::FNO model(fno::FNOOptions({4, 4}, 1, 1, 8).n_layers(1));
  fno::OffloadedStep step(model, fno::OffloadSettings());
  fno::AdamW adamw(model->parameters());
  fno::TrainStep train(
      step, adamw, [](const at::Tensor& a, const at::Tensor& b) { return (a - b).pow(2).sum(); });
  CHECK_THROWS_WITH_AS(train.enable_cuda_graphs(), doctest::Contains("cpu"), std::invalid_argument);
  CHECK_FALSE(train.cuda_graphs());
  CHECK_FALSE(adamw.device_step());
}
