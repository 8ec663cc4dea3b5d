// Navier-Stokes training (issue 27, item 3): the recurrent rollout against an
// explicit loop (predictions, the loss summed over the steps, and gradients
// through the whole rollout, checked against autograd on the loop and against
// finite differences in float64), the per-record and trajectory errors, the
// trainer on tiny generated data in both modes (the loss decreases; metrics,
// per-record errors and predictions in the run outputs), and the one-line
// errors of bad settings and files.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/optim.h>
#include <fno_data/darcy.h>
#include <fno_data/navier_stokes.h>
#include <fno_data/navier_stokes_gen.h>
#include <fno_train/config.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/rollout.h>
#include <fno_train/train_step.h>
#include <fno_train/trainer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

#include "golden.h"

using fno::test::out_path;
using fno::test::rel_err;

namespace {

// A tiny 2D FNO from 3 records to the next one.
fno::FNO tiny_2d(int64_t t_in = 3) {
  torch::manual_seed(3);
  return fno::FNO(fno::FNOOptions({4, 4}, t_in, 1, 6).n_layers(2));
}

fno::LpLoss l2_2d() { return fno::LpLoss(fno::LpLossOptions().d(2).p(2)); }

// The rollout written out by hand: the window of the last t_in records, the
// next predicted from it, appended, the oldest dropped.
std::vector<torch::Tensor> explicit_rollout(fno::FNO& model, const torch::Tensor& x,
                                            int64_t steps) {
  std::vector<torch::Tensor> preds;
  std::vector<torch::Tensor> window;
  for (int64_t c = 0; c < x.size(1); ++c) window.push_back(x.select(1, c));
  for (int64_t t = 0; t < steps; ++t) {
    auto next = model->forward(torch::stack(window, 1));  // [B, 1, H, W]
    preds.push_back(next);
    window.erase(window.begin());
    window.push_back(next.select(1, 0));
  }
  return preds;
}

// sum over steps and samples of ||p - y|| / ||y||, by hand.
torch::Tensor explicit_loss(const std::vector<torch::Tensor>& preds, const torch::Tensor& y) {
  torch::Tensor total = torch::zeros({}, preds[0].options());
  for (size_t t = 0; t < preds.size(); ++t) {
    for (int64_t b = 0; b < y.size(0); ++b) {
      const auto p = preds[t][b][0];
      const auto truth = y[b][static_cast<int64_t>(t)];
      total = total + (p - truth).pow(2).sum().sqrt() / truth.pow(2).sum().sqrt();
    }
  }
  return total;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Tiny Navier-Stokes files: 16^2, records every 0.1 up to 0.6 (6 records),
// 24 training and 8 test samples; made once per process, in a folder of its
// own (CTest runs test cases as parallel processes, and the generators write
// over no file).
std::string ns_files() {
  static const std::string stem = [] {
    const std::string dir = out_path("ns_train_tiny." + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto out = dir + "/ns_train_tiny.h5";
    fno::data::generate_navier_stokes(fno::data::NavierStokesGenOptions()
                                          .resolution(16)
                                          .samples(32)
                                          .test_samples(8)
                                          .seed(1)
                                          .viscosity(1e-3)
                                          .dt(1e-2)
                                          .t_final(0.6)
                                          .record_every(0.1)
                                          .device("cpu")
                                          .out(out));
    return dir + "/ns_train_tiny";
  }();
  return stem;
}

std::string ns_config(const std::string& mode) {
  const std::string stem = ns_files();
  const bool rec = mode == "recurrent";
  return std::string(R"(model:
  n_modes: )") +
         (rec ? "[6, 6]" : "[6, 6, 2]") + R"(
  in_channels: 3
  hidden_channels: 12
  n_layers: 2
data:
  problem: ns
  ns_mode: )" +
         mode + R"(
  t_in: 3
  t_out: 3
  train_file: )" +
         stem + R"(_train.h5
  n_train: 24
  batch_size: 4
  encode_input: false
  encode_output: )" +
         (rec ? "false" : "true") + R"(
  test:
    - {file: )" +
         stem + R"(_test.h5, name: ns, batch_size: 4}
  n_predictions: 2
optimizer:
  lr: 5.0e-3
scheduler:
  name: none
training:
  epochs: 8
  loss: l2
  eval_losses: [l2]
device:
  name: cpu
output:
  progress: none
)";
}

// The "train_loss" values of metrics.jsonl, in order.
std::vector<double> train_losses(const std::string& dir) {
  static const std::regex kLoss(R"("train_loss": ([0-9.eE+-]+))");
  std::vector<double> out;
  const auto text = read(dir + "/metrics.jsonl");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kLoss);
       it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

}  // namespace

TEST_CASE("rollout: the predictions and the summed loss of an explicit loop") {
  auto model = tiny_2d();
  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, 8, 8});
  const auto y = torch::randn({2, 4, 8, 8});
  torch::NoGradGuard no_grad;
  const auto pred = fno::rollout([&](const at::Tensor& in) { return model->forward(in); }, x, 4);
  REQUIRE(pred.sizes() == torch::IntArrayRef({2, 4, 8, 8}));
  const auto ref = explicit_rollout(model, x, 4);
  for (int64_t t = 0; t < 4; ++t) {
    INFO("step " << t);
    CHECK(torch::equal(pred.narrow(1, t, 1), ref[static_cast<size_t>(t)]));
  }
  // Step 1 is made from records 1, 2 and the first prediction.
  const auto second = model->forward(torch::cat({x.narrow(1, 1, 2), ref[0]}, 1));
  CHECK(torch::equal(second, ref[1]));
  const auto l2 = l2_2d();
  const auto loss =
      fno::rollout_loss([&](const auto& a, const auto& b) { return l2(a, b); }, pred, y);
  CHECK(loss.item<double>() == doctest::Approx(explicit_loss(ref, y).item<double>()).epsilon(1e-5));
  CHECK_THROWS_AS(fno::rollout([&](const at::Tensor& in) { return in; }, x, 2), c10::Error);
}

TEST_CASE("rollout errors: per record and over the whole trajectory") {
  torch::manual_seed(7);
  const auto y = torch::randn({3, 4, 8, 8}, torch::kDouble);
  const std::vector<double> c{0.1, -0.2, 0.3, 0.05};
  auto pred = y.clone();
  for (int64_t t = 0; t < 4; ++t) pred.select(1, t).mul_(1 + c[static_cast<size_t>(t)]);
  const auto per = fno::per_step_rel_l2(pred, y);
  REQUIRE(per.sizes() == torch::IntArrayRef({4}));
  for (int64_t t = 0; t < 4; ++t) {
    CHECK(per[t].item<double>() == doctest::Approx(3 * std::abs(c[static_cast<size_t>(t)])));
  }
  // Whole trajectory: sqrt(sum_t c_t^2 ||y_t||^2) / ||y||, per sample, summed.
  double want = 0;
  for (int64_t b = 0; b < 3; ++b) {
    double num = 0;
    for (int64_t t = 0; t < 4; ++t) {
      num += c[static_cast<size_t>(t)] * c[static_cast<size_t>(t)] *
             y[b][t].pow(2).sum().item<double>();
    }
    want += std::sqrt(num) / y[b].norm().item<double>();
  }
  CHECK(fno::trajectory_rel_l2(pred, y).item<double>() == doctest::Approx(want));
  // Up to each record: the whole-trajectory error of records 0..t, so the
  // last entry is the trajectory's and the first the first record's.
  const auto upto = fno::cumulative_rel_l2(pred, y);
  REQUIRE(upto.sizes() == torch::IntArrayRef({4}));
  for (int64_t t = 0; t < 4; ++t) {
    const auto k = t + 1;
    CHECK(upto[t].item<double>() ==
          doctest::Approx(
              fno::trajectory_rel_l2(pred.narrow(1, 0, k), y.narrow(1, 0, k)).item<double>()));
  }
  CHECK(upto[0].item<double>() == doctest::Approx(per[0].item<double>()));
  CHECK(upto[3].item<double>() == doctest::Approx(want));
}

TEST_CASE(
    "rollout gradients: TrainStep's rolled-out step, autograd on a loop, finite differences") {
  auto model = tiny_2d();
  torch::manual_seed(11);
  const auto x = torch::randn({2, 3, 8, 8});
  const auto y = torch::randn({2, 3, 8, 8});
  const auto l2 = l2_2d();
  const fno::StepLoss loss = [&](const at::Tensor& a, const at::Tensor& b) { return l2(a, b); };

  // The shared step with a rollout of 3: its loss and gradients (lr 0: the
  // update would change nothing, but only forward_backward runs here).
  fno::OffloadedStep offloaded(model, fno::OffloadSettings{});
  fno::AdamW opt(model->parameters(), fno::AdamWOptions(1e-3));
  fno::TrainStep step(offloaded, opt, loss);
  step.set_rollout(3);
  const auto got = step.forward_backward(x, y);
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();

  // The explicit loop, autograd on it.
  model->zero_grad();
  const auto want = explicit_loss(explicit_rollout(model, x, 3), y);
  want.backward();
  CHECK(got.item<double>() == doctest::Approx(want.item<double>()).epsilon(1e-5));
  for (const auto& p : model->named_parameters()) {
    INFO("parameter " << p.key());
    CHECK(rel_err(grads[p.key()], p.value().grad()) < 1e-5);
  }

  // Finite differences in float64 along a random direction of every
  // parameter (complex ones too: d/de L(theta + e v) = Re <grad, v>).
  auto copy = std::dynamic_pointer_cast<fno::FNOImpl>(model->clone());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : copy->parameters()) {
      p.set_data(p.is_complex() ? p.to(torch::kComplexDouble) : p.to(torch::kDouble));
    }
  }
  fno::FNO m64(copy);
  const auto x64 = x.to(torch::kDouble), y64 = y.to(torch::kDouble);
  const auto loss64 = [&] {
    return fno::rollout_loss(
        loss, fno::rollout([&](const at::Tensor& in) { return m64->forward(in); }, x64, 3), y64);
  };
  m64->zero_grad();
  loss64().backward();
  torch::manual_seed(13);
  std::vector<torch::Tensor> dirs;
  double analytic = 0;
  for (const auto& p : m64->parameters()) {
    dirs.push_back(torch::randn_like(p));
    analytic += torch::real((p.grad().conj() * dirs.back()).sum()).item<double>();
  }
  const double eps = 1e-6;
  const auto shifted = [&](double e) {
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& p : m64->parameters()) p.add_(dirs[i++], e);
    const double v = loss64().item<double>();
    i = 0;
    for (auto& p : m64->parameters()) p.sub_(dirs[i++], e);
    return v;
  };
  const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  CHECK(numeric == doctest::Approx(analytic).epsilon(1e-5));
  CHECK(std::abs(analytic) > 1e-3);  // a real slope, not two zeros
}

TEST_CASE("rollout steps refuse offload policies other than none, in one line") {
  auto model = tiny_2d();
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("all");
  fno::OffloadedStep offloaded(model, settings);
  fno::AdamW opt(model->parameters(), fno::AdamWOptions(1e-3));
  const auto l2 = l2_2d();
  fno::TrainStep step(offloaded, opt, [&](const auto& a, const auto& b) { return l2(a, b); });
  step.set_rollout(2);
  CHECK_THROWS_WITH_AS(
      step.forward_backward(torch::randn({1, 3, 8, 8}), torch::randn({1, 2, 8, 8})),
      doctest::Contains("needs policy none and one micro-batch, got policy 'all'"),
      std::invalid_argument);
}

TEST_CASE("Navier-Stokes training: both modes lower the loss and write per-record errors") {
  for (const std::string mode : {"space_time", "recurrent"}) {
    INFO("mode " << mode);
    const auto dir = out_path("ns_run_" + mode);
    std::filesystem::remove_all(dir);
    fno::Trainer trainer(fno::parse_config(ns_config(mode), "ns.yaml"), dir);
    const auto metrics = trainer.train();
    const auto losses = train_losses(dir);
    REQUIRE(losses.size() == 8);
    CHECK(losses.back() < 0.5 * losses.front());
    REQUIRE(metrics.count("ns_l2"));
    REQUIRE(metrics.count("ns_l2_step"));
    CHECK(metrics.at("ns_l2") > 0);
    CHECK(metrics.at("ns_l2") < 0.5);  // from about 1 before training
    // metrics.jsonl: the error per predicted record, 3 of them, each line.
    static const std::regex kPerStep(R"("ns_l2_per_step": \[([^\]]*)\])");
    std::smatch m;
    const auto text = read(dir + "/metrics.jsonl");
    REQUIRE(std::regex_search(text, m, kPerStep));
    const std::string list = m[1].str();
    CHECK(std::count(list.begin(), list.end(), ',') == 2);
    // ... and of the trajectory up to each record, whose last is that line's ns_l2.
    static const std::regex kUpTo(R"("ns_l2": ([^,]*),.*"ns_l2_upto": \[[^\]]*, ([^,\]]*)\])");
    int lines = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kUpTo);
         it != std::sregex_iterator(); ++it, ++lines) {
      CHECK(std::stod((*it)[2].str()) == doctest::Approx(std::stod((*it)[1].str())).epsilon(1e-6));
    }
    CHECK(lines >= 1);
    // predictions.h5: inputs, truth and prediction as trajectories, the error per record.
    const auto file = dir + "/predictions.h5";
    const auto rd = [&](const std::string& key) {
      return fno::data::load_hdf5(file, fno::data::LoadOptions().x_key(key).y_key(key))
          .x.squeeze(1);
    };
    CHECK(rd("ns/x").sizes() == torch::IntArrayRef({2, 3, 16, 16}));
    const auto y = rd("ns/y"), pred = rd("ns/pred");
    REQUIRE(y.sizes() == torch::IntArrayRef({2, 3, 16, 16}));
    REQUIRE(pred.sizes() == y.sizes());
    // The truth is the test file's records 3..5 of its first samples.
    const auto u = fno::data::load_ns_records(ns_files() + "_test.h5",
                                              fno::data::NsLoadOptions().t_in(3).t_out(3));
    CHECK(torch::equal(y, u.narrow(0, 0, 2).narrow(3, 3, 3).permute({0, 3, 1, 2})));
    CHECK(rel_err(pred, y) < 1.5);
  }
}

TEST_CASE(
    "the FNO paper's FNO-3D settings: pointwise normalization, decoded loss, one-sided padding") {
  const std::vector<std::string> paper{
      "data.encode_input=true", "data.normalization=pointwise", "training.loss_on=decoded",
      "model.domain_padding=[0, 0, 0.67]", "model.domain_padding_mode=one_sided"};
  const auto dir = out_path("ns_run_paper");
  std::filesystem::remove_all(dir);
  fno::Trainer trainer(fno::parse_config(ns_config("space_time"), "ns.yaml", paper), dir);
  const auto metrics = trainer.train();
  const auto losses = train_losses(dir);
  REQUIRE(losses.size() == 8);
  CHECK(losses.back() < 0.5 * losses.front());
  CHECK(metrics.at("ns_l2") > 0);
  CHECK(metrics.at("ns_l2") < 0.5);
  // The statistics per grid point: inputs [1, t_in, R, R], outputs [1, 1, R, R, t_out].
  const auto ckpt = fno::load_checkpoint_file(dir + "/checkpoint_latest.pt");
  CHECK(ckpt["norm.in.mean"].sizes() == torch::IntArrayRef({1, 3, 16, 16}));
  CHECK(ckpt["norm.out.std"].sizes() == torch::IntArrayRef({1, 1, 16, 16, 3}));
  // The loss on decoded outputs is another loss: the first epoch's differs.
  const auto normalized_dir = out_path("ns_run_paper_normalized");
  std::filesystem::remove_all(normalized_dir);
  auto set = paper;
  set[2] = "training.loss_on=normalized";
  set.push_back("training.epochs=1");
  fno::Trainer(fno::parse_config(ns_config("space_time"), "ns.yaml", set), normalized_dir).train();
  CHECK(std::abs(train_losses(normalized_dir).at(0) - losses.at(0)) > 1e-3 * losses.at(0));
  // A checkpoint of pointwise statistics does not resume a channel-wise run.
  set = paper;
  set[1] = "data.normalization=channel";
  set.push_back("training.epochs=9");
  fno::Trainer channel(fno::parse_config(ns_config("space_time"), "ns.yaml", set), dir);
  CHECK_THROWS_WITH(channel.resume(),
                    doctest::Contains("unusable checkpoint: normalizer statistics of shape"));
}

TEST_CASE("training_loss on decoded outputs: the loss of both decoded by the normalizer") {
  torch::manual_seed(6);
  const auto data = torch::randn({12, 1, 8, 8, 4}) * 2 + torch::linspace(-1, 1, 4);
  fno::data::UnitGaussianNormalizer norm(fno::data::NormalizerMode::kPointwise);
  norm.fit(data);
  fno::TrainingConfig t;
  t.loss = fno::LossName::kL2;
  const auto out = torch::randn({3, 1, 8, 8, 4}), y = norm.transform(data.narrow(0, 0, 3));
  const auto normalized = fno::training_loss(t, 3, &norm)(out, y);
  const fno::LpLoss l2(fno::LpLossOptions().d(3).p(2));
  CHECK(torch::allclose(normalized, l2(out, y)));
  t.loss_on = fno::LossSpace::kDecoded;
  const auto decoded = fno::training_loss(t, 3, &norm)(out, y);
  CHECK(torch::allclose(decoded, l2(norm.inverse_transform(out), data.narrow(0, 0, 3)), 1e-5));
  CHECK(!torch::allclose(decoded, normalized, 1e-2));
  // Without normalized outputs there is nothing to decode.
  CHECK(torch::allclose(fno::training_loss(t, 3, nullptr)(out, y), normalized));
}

TEST_CASE("Navier-Stokes settings: one-line errors naming the key or the file") {
  const auto bad = [](const std::string& mode, const std::vector<std::string>& sets,
                      const std::string& expected) {
    INFO("--set " << (sets.empty() ? "" : sets.back()));
    try {
      fno::Trainer trainer(fno::parse_config(ns_config(mode), "ns.yaml", sets), out_path("ns_bad"));
      FAIL("no error; expected: ", expected);
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      INFO("message: " << msg);
      CHECK(msg.find('\n') == std::string::npos);
      CHECK(msg.find(expected) != std::string::npos);
    }
  };
  bad("space_time", {"data.t_in=0"}, "data.t_in: expected an integer >= 1, got 0");
  bad("space_time", {"data.t_out=0"}, "data.t_out: expected -1 (the rest) or >= 1, got 0");
  bad("space_time", {"data.ns_mode=sideways"}, "data.ns_mode: unknown value 'sideways'");
  bad("space_time", {"data.problem=heat"}, "data.problem: unknown value 'heat'");
  bad("space_time", {"data.y_key=sol"}, "data.y_key: not used with data.problem ns");
  bad("recurrent", {"data.encode_output=true"},
      "data.encode_output: must be false with data.ns_mode recurrent");
  bad("recurrent", {"offload.policy=all"},
      "offload.policy: 'all' does not apply to data.ns_mode recurrent");
  bad("recurrent", {"offload.micro_batches=2"},
      "offload.micro_batches: must be 1 with data.ns_mode recurrent");
  bad("recurrent", {"training.eval_losses=[l2, h1]"},
      "training.eval_losses: 'h1' is not defined over a rollout");
  // The file against the settings: more records than it holds, its shape, the model.
  bad("space_time", {"data.t_out=4"},
      "ns_train_tiny_train.h5: dataset 'u' holds 6 records; t_in 3 and t_out 4 need 7");
  bad("recurrent", {"data.x_key=a"},
      "ns_train_tiny_train.h5: dataset 'a' has rank 3, expected (N, R, R, T) records");
  bad("space_time", {"model.n_modes=[6, 6]"},
      "data.ns_mode space_time trains a 3D FNO over (x, y, t), but model.n_modes has 2 entries");
  bad("recurrent", {"model.in_channels=1"},
      "data.t_in 3 records in and one record out need model.in_channels 3");
  // A test file with fewer records than the training file's t_out.
  const auto short_file = out_path("ns_short.h5");
  fno::data::write_hdf5(short_file, {{"u", torch::zeros({2, 16, 16, 5})}});
  bad("recurrent", {"data.test=[{file: " + short_file + "}]"},
      "ns_short.h5: dataset 'u' holds 5 records; t_in 3 and t_out 3 need 6");
}

TEST_CASE("Navier-Stokes configs: the paper's settings, one per row and model") {
  struct Row {
    const char* name;
    int64_t t_out, n_train;
  };
  // Li et al. 2020, Table 1: nu = 1e-3, T = 50; 1e-4, T = 30 (N = 1000 and
  // 10000); 1e-5, T = 20; always 10 records in.
  for (const Row row : {Row{"ns_v1e-3", 40, 1000}, Row{"ns_v1e-4", 20, 1000},
                        Row{"ns_v1e-4_n10000", 20, 10000}, Row{"ns_v1e-5", 10, 1000}}) {
    for (const std::string model : {"fno2d", "fno3d"}) {
      const std::string file =
          std::string(FNO_SOURCE_DIR) + "/configs/" + row.name + "_" + model + ".yaml";
      INFO("config " << file);
      const auto c = fno::load_config(file);
      const bool three = model == "fno3d";
      CHECK(c.data.problem == fno::DataProblem::kNavierStokes);
      CHECK(c.data.ns_mode == (three ? fno::NsMode::kSpaceTime : fno::NsMode::kRecurrent));
      CHECK(c.data.t_in == 10);
      CHECK(c.data.t_out == row.t_out);
      CHECK(c.data.n_train == row.n_train);
      CHECK(c.data.batch_size == (three ? 10 : 20));
      REQUIRE(c.data.tests.size() == 1);
      CHECK(c.data.tests[0].n_samples == 200);
      CHECK(c.model.in_channels() == 10);
      CHECK(c.model.out_channels() == 1);
      CHECK(c.model.hidden_channels() == 20);
      // The paper's modes 8 (3D) and 12 (2D) in neuraloperator's convention.
      CHECK(c.model.n_modes() ==
            (three ? std::vector<int64_t>{16, 16, 14} : std::vector<int64_t>{24, 22}));
      // FNO-3D pads time by 6 records at its end (F.pad(x, [0, 6])), space not at
      // all; it normalizes pointwise and takes the loss on decoded outputs. The
      // FNO-2D rollout trains on raw records.
      const fno::FNO fno_model(c.model);
      const std::vector<int64_t> grid =
          three ? std::vector<int64_t>{64, 64, row.t_out} : std::vector<int64_t>{64, 64};
      CHECK(fno_model->padding_for(grid) ==
            (three ? std::vector<int64_t>{0, 0, 6} : std::vector<int64_t>{}));
      if (three) {
        CHECK(c.model.domain_padding_mode() == fno::PaddingMode::kOneSided);
        CHECK(c.data.encode_input);
        CHECK(c.data.encode_output);
        CHECK(c.data.normalization == fno::data::NormalizerMode::kPointwise);
        CHECK(c.training.loss_on == fno::LossSpace::kDecoded);
      } else {
        CHECK(!c.data.encode_input);
        CHECK(!c.data.encode_output);
        // The paper's blocks (spectral conv + 1x1 conv, one GELU between
        // blocks): the paper's FNO-2D's 926,357 parameters. nu = 1e-5's keeps
        // neuraloperator's blocks, which its committed runs trained.
        const bool paper_blocks = std::string(row.name) != "ns_v1e-5";
        CHECK(c.model.use_channel_mlp() == !paper_blocks);
        CHECK(c.model.single_gelu() == paper_blocks);
        if (paper_blocks) CHECK(fno::count_params(*fno_model) == 926357);
      }
      // The paper's initialization of the spectral weights only where it was
      // chosen on validation samples: nu = 1e-3's FNO-3D
      // (docs/data.md#the-1e-3-fno-3d-cell).
      const bool paper_init = three && std::string(row.name) == "ns_v1e-3";
      CHECK(c.model.spectral_init() ==
            (paper_init ? fno::SpectralInit::kPaper : fno::SpectralInit::kNeuralOperator));
      // Gradient clipping only where a run diverged without it: nu = 1e-3's
      // FNO-2D.
      const bool clipped = !three && std::string(row.name) == "ns_v1e-3";
      CHECK(c.training.max_grad_norm == doctest::Approx(clipped ? 1e4 : 0.0));
      CHECK(c.training.epochs == 500);
      CHECK(c.training.loss == fno::LossName::kL2);
      // torch.optim.Adam(lr=1e-3, weight_decay=1e-4), as the paper's scripts.
      CHECK(c.optimizer.name == fno::OptimizerName::kAdam);
      CHECK(c.optimizer.lr == doctest::Approx(1e-3));
      CHECK(c.optimizer.weight_decay == doctest::Approx(1e-4));
      CHECK(c.optimizer.eps == doctest::Approx(1e-8));
      CHECK(c.scheduler.name == fno::SchedulerName::kStep);
      CHECK(c.scheduler.step_size == 100);
      CHECK(c.scheduler.gamma == doctest::Approx(0.5));
    }
  }
  for (const std::string model : {"fno2d", "fno3d"}) {
    const auto c =
        fno::load_config(std::string(FNO_SOURCE_DIR) + "/configs/ns_smoke_" + model + ".yaml");
    CHECK(c.data.problem == fno::DataProblem::kNavierStokes);
    CHECK(c.device.name == "cpu");
  }
}
