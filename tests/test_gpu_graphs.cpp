// CUDA graphs of the step (label "gpu", issue 28): the graphed step against
// the eager step (losses and parameters over epochs with a learning rate the
// scheduler changes, a partial last batch, fp32 and bf16, the recurrent
// rollout), fp16 with a forced non-finite gradient (skipped on the device, the
// scale backing off), evaluation's graphs against eager evaluation, a whole
// fno_train run with graphs on and off, and the fallback's one line.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/optim.h>
#include <fno/precision.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_train/train_step.h>
#include <fno_train/trainer.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "golden.h"
#include "stderr_capture.h"

using fno::test::count_of;
using fno::test::free_port;
using fno::test::out_path;
using fno::test::rel_err;
using fno::test::StderrCapture;

namespace {

// The seed model's blocks (32 channels: the fused kernels) on a small grid.
fno::FNOOptions small_model(int64_t in_channels = 1) {
  return fno::FNOOptions({8, 8}, in_channels, 1, 32).projection_channel_ratio(2);
}

// A model, AdamW with a cosine schedule, fp16's scaler, and the training step.
struct Run {
  fno::FNO model{nullptr};
  std::unique_ptr<fno::AdamW> adamw;
  std::unique_ptr<fno::CosineAnnealingLR> schedule;
  std::unique_ptr<fno::OffloadedStep> step;
  std::unique_ptr<fno::GradScaler> scaler;
  std::unique_ptr<fno::TrainStep> train;
  fno::H1Loss h1{fno::H1LossOptions().d(2)};

  // graphs: the step as CUDA graphs; device_step (without graphs): eager steps
  // with AdamW's device step, the arithmetic the graphs hold.
  Run(const fno::FNOOptions& options, fno::Precision precision, bool graphs, int64_t rollout = 0,
      bool device_step = false, double max_grad_norm = 0) {
    torch::manual_seed(0);
    model = fno::FNO(fno::FNOOptions(options).compute_dtype(fno::compute_dtype(precision)));
    model->to(torch::kCUDA);
    adamw = std::make_unique<fno::AdamW>(model->parameters(),
                                         fno::AdamWOptions(8e-3).weight_decay(1e-4));
    schedule = std::make_unique<fno::CosineAnnealingLR>(*adamw, 3);
    step = std::make_unique<fno::OffloadedStep>(model, fno::OffloadSettings());
    if (fno::needs_loss_scaling(precision)) {
      scaler = std::make_unique<fno::GradScaler>(fno::GradScalerOptions(), torch::kCUDA);
    }
    train = std::make_unique<fno::TrainStep>(
        *step, *adamw, [this](const at::Tensor& a, const at::Tensor& b) { return h1(a, b); },
        scaler.get());
    if (rollout > 0) train->set_rollout(rollout);
    if (max_grad_norm > 0) train->set_max_grad_norm(max_grad_norm);
    if (graphs) train->enable_cuda_graphs();
    if (device_step && !graphs) adamw->set_device_step(true);
  }

  // The relative difference of all parameters together from `other`'s:
  // ||p - p'|| / ||p'|| over every entry of every parameter.
  double param_err(const Run& other) const {
    double num = 0, den = 0;
    const auto mine = model->parameters(), theirs = other.model->parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      const auto a = mine[i].detach().to(torch::kComplexDouble);
      const auto b = theirs[i].detach().to(torch::kComplexDouble);
      num += (a - b).abs().pow(2).sum().item<double>();
      den += b.abs().pow(2).sum().item<double>();
    }
    return std::sqrt(num / den);
  }
  // The largest relative difference of one parameter tensor from `other`'s
  // (in bf16 and fp16 a small one, whose gradient is at the noise of the
  // rounding, follows AdamW's normalized step wherever that noise sends it).
  double worst_param_err(const Run& other) const {
    double worst = 0;
    const auto mine = model->parameters(), theirs = other.model->parameters();
    for (size_t i = 0; i < mine.size(); ++i) worst = std::max(worst, rel_err(mine[i], theirs[i]));
    return worst;
  }
};

// Tolerances of graphed against eager steps: fp32 differs by AdamW's rounding
// alone; bf16 and fp16 round the weights to 8 or 11 bits in the forward,
// where a last-bit difference of a weight flips a rounding.
double loss_tolerance(fno::Precision p) { return p == fno::Precision::kFP32 ? 1e-5 : 1e-4; }
double param_tolerance(fno::Precision p) { return p == fno::Precision::kFP32 ? 1e-5 : 1e-3; }

struct Batch {
  torch::Tensor x, y;
};

// Four full batches of 8 and a partial one of 3 at 32^2: an epoch.
std::vector<Batch> epoch_batches(int64_t in_channels = 1, int64_t out_channels = 1) {
  torch::manual_seed(7);
  std::vector<Batch> batches;
  for (const int64_t b : {8, 8, 8, 8, 3}) {
    batches.push_back({torch::randn({b, in_channels, 32, 32}, torch::kCUDA),
                       torch::randn({b, out_channels, 32, 32}, torch::kCUDA)});
  }
  return batches;
}

double rel_diff(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

// A process group of one NCCL rank on GPU 0: the path of several ranks, on one GPU.
std::shared_ptr<fno::dist::Group> one_rank_nccl_group() {
  fno::dist::LaunchEnv env;
  env.master_port = free_port();
  fno::dist::GroupOptions o;
  o.backend = fno::dist::Backend::kNccl;
  o.timeout = std::chrono::seconds(60);
  return fno::dist::Group::create(env, torch::Device(torch::kCUDA, 0), o);
}

}  // namespace

TEST_CASE(
    "GPU graphs: the graphed step follows the eager step (fp32, bf16; lr schedule, partial "
    "batch)") {
  const auto batches = epoch_batches();
  for (const auto precision : {fno::Precision::kFP32, fno::Precision::kBF16}) {
    INFO("precision ", fno::to_string(precision));
    Run eager(small_model(), precision, false), graphed(small_model(), precision, true);
    Run device(small_model(), precision, false, 0, /*device_step=*/true);
    CHECK(graphed.train->cuda_graphs());
    double worst_loss = 0, worst_loss_device = 0;
    for (int epoch = 0; epoch < 5; ++epoch) {
      for (const auto& b : batches) {
        const double le = eager.train->run(b.x, b.y).loss.item<double>();
        const double ld = device.train->run(b.x, b.y).loss.item<double>();
        const double lg = graphed.train->run(b.x, b.y).loss.item<double>();
        worst_loss = std::max(worst_loss, rel_diff(lg, le));
        worst_loss_device = std::max(worst_loss_device, rel_diff(lg, ld));
      }
      eager.schedule->step();
      device.schedule->step();
      graphed.schedule->step();
    }
    // Three eager steps per shape, then its capture: the partial batch's in epoch 4.
    CHECK(graphed.train->captured(batches[0].x, batches[0].y));
    CHECK(graphed.train->captured(batches[4].x, batches[4].y));
    const double param = graphed.param_err(eager), param_device = graphed.param_err(device);
    MESSAGE(fno::to_string(precision), ": 25 steps, graphed against eager: worst loss difference ",
            worst_loss, ", parameters ", param, " (worst tensor ", graphed.worst_param_err(eager),
            "); against eager steps with AdamW's device step: loss ", worst_loss_device,
            ", parameters ", param_device);
    CHECK(worst_loss <= loss_tolerance(precision));
    CHECK(param <= param_tolerance(precision));
    CHECK(worst_loss_device <= loss_tolerance(precision));
    CHECK(param_device <= param_tolerance(precision));
    CHECK(graphed.adamw->param_groups()[0].options().get_lr() ==
          eager.adamw->param_groups()[0].options().get_lr());
  }
}

TEST_CASE(
    "GPU graphs: a step over a gradient sync, two graphs and the all-reduce between, follows "
    "the step without (one NCCL rank; fp32, fp16)") {
  // Several ranks take a step as two graphs (TrainStep, GradientSync pack /
  // reduce / unpack); one rank runs that path on one GPU, where the sum over
  // ranks is the rank's own gradients.
  const auto group = one_rank_nccl_group();
  const auto batches = epoch_batches();
  for (const auto precision : {fno::Precision::kFP32, fno::Precision::kFP16}) {
    INFO("precision ", fno::to_string(precision));
    Run plain(small_model(), precision, true), synced(small_model(), precision, false);
    // Small buckets: several of them.
    fno::dist::GradientSync sync(group, synced.model->parameters(),
                                 fno::dist::GradientSyncOptions{1 << 16});
    synced.train->set_gradient_sync(&sync);
    synced.train->enable_cuda_graphs();
    double worst_loss = 0;
    for (int epoch = 0; epoch < 5; ++epoch) {
      for (const auto& b : batches) {
        const double lp = plain.train->run(b.x, b.y).loss.item<double>();
        const double ls = synced.train->run(b.x, b.y).loss.item<double>();
        worst_loss = std::max(worst_loss, rel_diff(ls, lp));
      }
      plain.schedule->step();
      synced.schedule->step();
    }
    CHECK(sync.buckets() > 1);
    CHECK(synced.train->captured(batches[0].x, batches[0].y));
    CHECK(synced.train->captured(batches[4].x, batches[4].y));
    const double param = synced.param_err(plain);
    MESSAGE(fno::to_string(precision), ": 25 steps over a one-rank sync against none: worst loss ",
            "difference ", worst_loss, ", parameters ", param);
    CHECK(worst_loss <= loss_tolerance(precision));
    CHECK(param <= param_tolerance(precision));
    if (precision == fno::Precision::kFP16) {
      CHECK(synced.scaler->scale_value() == plain.scaler->scale_value());
    }
  }
}

TEST_CASE("GPU graphs: fp16 skips a non-finite step on the device and backs the scale off") {
  const auto batches = epoch_batches();
  Run eager(small_model(), fno::Precision::kFP16, false),
      graphed(small_model(), fno::Precision::kFP16, true);
  // A batch whose fp16 input overflows: every gradient is NaN.
  const auto bad_x = batches[1].x * 1e6;
  int64_t skipped_eager = 0, skipped_graphed = 0;
  for (int t = 0; t < 14; ++t) {
    INFO("step ", t);
    const bool bad = t == 9;  // a replay: the full batch's graph was captured at step 3
    const auto& b = batches[t % 4];
    const auto& x = bad ? bad_x : b.x;
    std::vector<torch::Tensor> before;
    for (const auto& p : graphed.model->parameters()) before.push_back(p.detach().clone());
    const double scale_before = graphed.scaler->scale_value();
    const auto re = eager.train->run(x, b.y);
    const auto rg = graphed.train->run(x, b.y);
    REQUIRE(rg.taken.defined());
    const bool taken = rg.taken.item<float>() == 1.0f;
    CHECK(taken == re.stepped);
    skipped_eager += re.stepped ? 0 : 1;
    skipped_graphed += taken ? 0 : 1;
    if (bad) {
      CHECK(graphed.train->captured(x, b.y));
      CHECK_FALSE(re.stepped);
      CHECK_FALSE(taken);
      const auto after = graphed.model->parameters();
      for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(after[i], before[i]));
      CHECK(graphed.scaler->scale_value() == scale_before / 2);
    }
    CHECK(graphed.scaler->scale_value() == eager.scaler->scale_value());
  }
  CHECK(skipped_graphed >= 1);
  CHECK(skipped_graphed == skipped_eager);
  CHECK(graphed.scaler->skipped_steps() == eager.scaler->skipped_steps());
  const double param = graphed.param_err(eager);
  MESSAGE("fp16: 14 steps, ", skipped_graphed, " skipped, parameters against eager ", param,
          " (worst tensor ", graphed.worst_param_err(eager), ")");
  CHECK(param <= param_tolerance(fno::Precision::kFP16));
  // The checkpoint's step counts: the steps taken.
  CHECK(graphed.adamw->state_dict()["state.0.step"].item<int64_t>() ==
        eager.adamw->state_dict()["state.0.step"].item<int64_t>());
}

TEST_CASE("GPU graphs: the recurrent rollout's step, graphed, follows the eager one") {
  // x: the last 3 records, y: the next 4, rolled out.
  torch::manual_seed(9);
  const auto x = torch::randn({4, 3, 32, 32}, torch::kCUDA);
  const auto y = torch::randn({4, 4, 32, 32}, torch::kCUDA);
  Run eager(small_model(3), fno::Precision::kFP32, false, 4),
      graphed(small_model(3), fno::Precision::kFP32, true, 4);
  double worst_loss = 0;
  for (int t = 0; t < 8; ++t) {
    const double le = eager.train->run(x, y).loss.item<double>();
    const double lg = graphed.train->run(x, y).loss.item<double>();
    worst_loss = std::max(worst_loss, rel_diff(lg, le));
  }
  CHECK(graphed.train->captured(x, y));
  const double param = graphed.param_err(eager);
  MESSAGE("rollout of 4: 8 steps, worst loss difference ", worst_loss, ", parameters ", param,
          " (worst tensor ", graphed.worst_param_err(eager), ")");
  CHECK(worst_loss <= 1e-5);
  CHECK(param <= 1e-5);
}

TEST_CASE(
    "GPU graphs: gradient clipping, graphed (one graph, and two over a one-rank sync), follows "
    "the eager clipped step") {
  const auto batches = epoch_batches();
  // The norms unclipped: the clipping bound is half their smallest, so every step clips.
  double smallest = 1e30;
  {
    Run measure(small_model(), fno::Precision::kFP32, false, 0, false, 1e30);
    for (const auto& b : batches) {
      const auto r = measure.train->run(b.x, b.y);
      REQUIRE(r.grad_norm.defined());
      smallest = std::min(smallest, r.grad_norm.item<double>());
    }
  }
  const double bound = smallest / 2;
  const auto group = one_rank_nccl_group();
  Run eager(small_model(), fno::Precision::kFP32, false, 0, false, bound),
      graphed(small_model(), fno::Precision::kFP32, true, 0, false, bound),
      unclipped(small_model(), fno::Precision::kFP32, true),
      synced(small_model(), fno::Precision::kFP32, false);
  fno::dist::GradientSync sync(group, synced.model->parameters(),
                               fno::dist::GradientSyncOptions{1 << 16});
  synced.train->set_gradient_sync(&sync);
  synced.train->set_max_grad_norm(bound);
  synced.train->enable_cuda_graphs();
  double worst_loss = 0, worst_norm = 0, worst_loss_synced = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const auto& b : batches) {
      const auto re = eager.train->run(b.x, b.y);
      const auto rg = graphed.train->run(b.x, b.y);
      const auto rs = synced.train->run(b.x, b.y);
      unclipped.train->run(b.x, b.y);
      REQUIRE(rg.grad_norm.defined());
      REQUIRE(rs.grad_norm.defined());
      const double ne = re.grad_norm.item<double>();
      CHECK(ne > bound);  // clipped
      worst_norm = std::max({worst_norm, rel_diff(rg.grad_norm.item<double>(), ne),
                             rel_diff(rs.grad_norm.item<double>(), ne)});
      const double le = re.loss.item<double>();
      worst_loss = std::max(worst_loss, rel_diff(rg.loss.item<double>(), le));
      worst_loss_synced = std::max(worst_loss_synced, rel_diff(rs.loss.item<double>(), le));
    }
  }
  CHECK(graphed.train->captured(batches[0].x, batches[0].y));
  CHECK(synced.train->captured(batches[0].x, batches[0].y));
  const double param = graphed.param_err(eager), param_synced = synced.param_err(eager);
  const double moved = unclipped.param_err(eager);
  MESSAGE("clipped at ", bound, ": 15 steps, graphed against eager: worst loss difference ",
          worst_loss, ", norm ", worst_norm, ", parameters ", param,
          "; over a one-rank sync: loss ", worst_loss_synced, ", parameters ", param_synced,
          "; unclipped against clipped: ", moved);
  CHECK(worst_loss <= 1e-5);
  CHECK(worst_loss_synced <= 1e-5);
  CHECK(worst_norm <= 1e-5);
  CHECK(param <= 1e-5);
  CHECK(param_synced <= 1e-5);
  CHECK(moved > 100 * param);  // the clipping changed the steps
}

TEST_CASE("GPU graphs: AdamW's device step on CUDA gives the host step's numbers") {
  torch::manual_seed(4);
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  std::vector<torch::Tensor> host{
      torch::randn({64, 33}, opts).requires_grad_(true),
      torch::randn({5}, opts).requires_grad_(true),
      torch::randn({16, 8}, opts.dtype(torch::kComplexFloat)).requires_grad_(true)};
  std::vector<torch::Tensor> dev;
  for (const auto& p : host) dev.push_back(p.detach().clone().requires_grad_(true));
  fno::AdamW a(host, fno::AdamWOptions(8e-3).weight_decay(1e-4));
  fno::AdamW b(dev, fno::AdamWOptions(8e-3).weight_decay(1e-4));
  fno::CosineAnnealingLR sa(a, 5), sb(b, 5);
  b.set_device_step(true);
  for (int t = 0; t < 40; ++t) {
    for (size_t i = 0; i < host.size(); ++i) {
      const auto g = torch::randn_like(host[i]);
      host[i].mutable_grad() = g;
      dev[i].mutable_grad() = g.clone();
    }
    a.step();
    b.step();
    sa.step();
    sb.step();
  }
  double worst = 0;
  bool equal = true;
  for (size_t i = 0; i < host.size(); ++i) {
    worst = std::max(worst, rel_err(dev[i], host[i]));
    equal = equal && torch::equal(dev[i], host[i]);
  }
  MESSAGE("AdamW on CUDA, 40 steps, device step against host step: ",
          std::string(equal ? "bitwise equal" : "not bitwise equal"),
          ", worst relative difference ", worst);
  CHECK(worst <= 1e-6);
}

TEST_CASE("GPU graphs: a captured evaluation equals the eager one") {
  Run run(small_model(), fno::Precision::kFP32, true);
  const auto batches = epoch_batches();
  fno::LpLoss l2(fno::LpLossOptions().d(2).p(2));
  const auto sums = torch::zeros({2}, torch::TensorOptions().device(torch::kCUDA));
  fno::GraphedFunction eval(
      [&](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        torch::NoGradGuard no_grad;
        // x: [b, 1, 32, 32] -> out: [b, 1, 32, 32]
        const auto out = run.model->forward(in[0]);
        sums.add_(torch::stack({run.h1(out, in[1]), l2(out, in[1])}));
        return {out};
      },
      torch::Device(torch::kCUDA, 0), fno::TrainStep::kGraphWarmup, run.train->graph_pool());
  // A training step first, so that the pool holds the step's graph and gradients.
  for (int t = 0; t < 5; ++t) run.train->run(batches[0].x, batches[0].y);
  torch::Tensor eager_sums;
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> v;
    for (const auto& b : batches) {
      const auto out = run.model->forward(b.x);
      const auto s = torch::stack({run.h1(out, b.y), l2(out, b.y)});
      eager_sums = eager_sums.defined() ? eager_sums + s : s;
    }
  }
  for (int pass = 0; pass < 5; ++pass) {
    INFO("pass ", pass);
    sums.zero_();
    double worst_out = 0;
    for (const auto& b : batches) {
      const auto out = eval.run({b.x, b.y}).at(0);
      torch::NoGradGuard no_grad;
      worst_out = std::max(worst_out, rel_err(out, run.model->forward(b.x)));
    }
    CHECK(worst_out <= 1e-6);
    CHECK(rel_err(sums, eager_sums) <= 1e-6);
  }
  CHECK(eval.captured({batches[4].x, batches[4].y}));
  CHECK(eval.graphs() == 2);
}

namespace {

// clang-format off
const std::string kSeedLike = R"(model:
  n_modes: [16, 16]
  hidden_channels: 32
  projection_channel_ratio: 2
data:
  train_file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_train_16.pt
  n_train: 200
  batch_size: 32
  test:
    - {file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_test_16.pt, n_samples: 50, batch_size: 32}
    - {file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_test_32.pt, n_samples: 50, batch_size: 32}
  n_predictions: 2
optimizer:
  lr: 8.0e-3
  weight_decay: 1.0e-4
scheduler:
  name: cosine
  T_max: 30
training:
  epochs: 6
device:
  name: cuda
output:
  progress: none
)";
// clang-format on

}  // namespace

TEST_CASE("GPU graphs: fno_train with graphs on matches graphs off (metrics, every epoch)") {
  std::map<std::string, double> metrics[2];
  std::string said[2];
  for (int i = 0; i < 2; ++i) {
    const std::string mode = i == 0 ? "off" : "on";
    const auto dir = out_path("gpu_graphs_run_" + mode);
    std::system(("rm -rf '" + dir + "'").c_str());
    StderrCapture capture(dir + ".stderr");
    fno::Trainer trainer(
        fno::parse_config(kSeedLike, "seed.yaml", {"training.cuda_graphs=" + mode}), dir);
    CHECK((trainer.describe().find("CUDA graphs") != std::string::npos) == (i == 1));
    metrics[i] = trainer.train();
    said[i] = capture.text();
  }
  CHECK(count_of(said[0] + said[1], "cuda_graphs") == 0);
  REQUIRE(metrics[0].size() == metrics[1].size());
  double worst = 0;
  for (const auto& [k, v] : metrics[0]) {
    INFO("metric ", k);
    REQUIRE(metrics[1].count(k) == 1);
    worst = std::max(worst, rel_diff(metrics[1][k], v));
  }
  MESSAGE(
      "6 epochs of 200 samples (6 full batches, one of 8), 2 test sets: worst metric "
      "difference, graphs on against off, ",
      worst);
  CHECK(worst <= 1e-5);
}

TEST_CASE("GPU graphs: a run that cannot take graphs says why once and trains eagerly") {
  for (const std::string mode : {"on", "auto"}) {
    INFO("mode ", mode);
    const auto dir = out_path("gpu_graphs_fallback_" + mode);
    std::system(("rm -rf '" + dir + "'").c_str());
    StderrCapture capture(dir + ".stderr");
    fno::Trainer trainer(fno::parse_config(kSeedLike, "seed.yaml",
                                           {"training.cuda_graphs=" + mode, "offload.policy=all",
                                            "training.epochs=2", "offload.timeline=false"}),
                         dir);
    trainer.train();
    const auto said = capture.text();
    INFO("stderr: ", said);
    CHECK(count_of(said, "training.cuda_graphs " + mode + ": offload policy 'all'") == 1);
    CHECK(count_of(said, "cuda_graphs") == 1);
    CHECK(trainer.describe().find("CUDA graphs") == std::string::npos);
  }
}

TEST_CASE("GPU graphs: a shape over the capture limit runs eagerly, said once, same numbers") {
  // A limit no step meets: each shape stays eager after its timed warm-up.
  Run limited(small_model(), fno::Precision::kFP32, /*graphs=*/false);
  limited.train->enable_cuda_graphs(fno::TrainStep::kGraphWarmup, /*capture_limit_ms=*/1e-6);
  Run eager(small_model(), fno::Precision::kFP32, /*graphs=*/false, 0, /*device_step=*/true);
  const auto batches = epoch_batches();
  const auto dir = out_path("gpu_graphs_limit");
  StderrCapture capture(dir + ".stderr");
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const auto& b : batches) {
      const auto rl = limited.train->run(b.x, b.y);
      const auto re = eager.train->run(b.x, b.y);
      CHECK(rel_diff(rl.loss.item<double>(), re.loss.item<double>()) <= 1e-6);
    }
    limited.schedule->step();
    eager.schedule->step();
  }
  for (const auto& b : batches) CHECK_FALSE(limited.train->captured(b.x, b.y));
  const auto said = capture.text();
  INFO("stderr: ", said);
  // One line for the full batches' shape, once (the partial batch's shape,
  // two steps, is still warming up).
  CHECK(count_of(said, "CUDA graphs (auto): a step of inputs [8, 1, 32, 32]") == 1);
  CHECK(count_of(said, "it runs eagerly") == 1);
  CHECK(limited.param_err(eager) <= 1e-6);
}

TEST_CASE("GPU graphs: a capture takes the memory the eager warm-ups cached") {
  // The graphs' pool reuses what the warm-ups' freed blocks held: reserved
  // memory after capture stays near one step's, not two.
  const auto x = torch::randn({32, 1, 128, 128}, torch::kCUDA);
  const auto y = torch::randn({32, 1, 128, 128}, torch::kCUDA);
  c10::cuda::CUDACachingAllocator::emptyCache();
  int64_t eager_reserved = 0;
  {
    Run eager(small_model(), fno::Precision::kFP32, /*graphs=*/false, 0, /*device_step=*/true);
    for (int i = 0; i < 4; ++i) eager.train->run(x, y);
    torch::cuda::synchronize();
    eager_reserved = c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].current;
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  Run graphed(small_model(), fno::Precision::kFP32, /*graphs=*/true);
  for (int i = 0; i < 6; ++i) graphed.train->run(x, y);
  torch::cuda::synchronize();
  CHECK(graphed.train->captured(x, y));
  const auto graphed_reserved =
      c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].current;
  MESSAGE("reserved after 4 eager steps ", eager_reserved >> 20, " MiB; after capture ",
          graphed_reserved >> 20, " MiB");
  CHECK(static_cast<double>(graphed_reserved) <= 1.3 * static_cast<double>(eager_reserved));
}

TEST_CASE("GPU graphs: after a failed capture the pool, the allocator and the RNG work on") {
  // A body that reads a number to the host cannot be captured. Afterwards the
  // function runs eagerly; random numbers outside any capture, a capture into
  // the same pool and its replays work as before (LibTorch's capture_end left
  // the allocator routing into the pool and the generator in capture mode).
  const torch::Device dev(torch::kCUDA, 0);
  const auto x = torch::randn({64, 256}, dev);
  bool sync_in_body = true;
  fno::GraphedFunction bad(
      [&](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        // in[0]: [64, 256] -> [64, 256]
        auto y = torch::tanh(in[0]) * 2;
        if (sync_in_body) (void)y.sum().item<float>();  // a host read: no graph holds it
        return {y};
      },
      dev, /*warmup=*/1);
  (void)bad.run({x});  // the warm-up, eager
  CHECK_THROWS_AS((void)bad.run({x}), fno::GraphCaptureError);
  CHECK_FALSE(bad.captured({x}));
  // Random numbers outside a capture.
  torch::Tensor r;
  CHECK_NOTHROW(r = torch::rand({1000}, dev));
  CHECK(r.min().item<float>() >= 0.0f);
  // A capture into the same pool, with random numbers inside it (the
  // generator's capture state is whole again).
  fno::GraphedFunction good(
      [&](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        // in[0]: [64, 256] -> [64, 256], [64, 256]
        return {torch::tanh(in[0]) * 2, torch::rand_like(in[0])};
      },
      dev, /*warmup=*/1, bad.pool());
  for (int i = 0; i < 4; ++i) {
    const auto x2 = torch::randn({64, 256}, dev);
    const auto out = good.run({x2});
    CHECK(rel_err(out.at(0), torch::tanh(x2) * 2) <= 1e-6);
    CHECK(out.at(1).min().item<float>() >= 0.0f);
    CHECK(out.at(1).max().item<float>() < 1.0f);
  }
  CHECK(good.captured({x}));
  // Two replays draw different numbers (the graph's RNG offsets advance).
  const auto a = good.run({x}).at(1).clone();
  const auto b = good.run({x}).at(1).clone();
  CHECK_FALSE(torch::equal(a, b));
}
