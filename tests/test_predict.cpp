// fno_predict's engine (fno_train/predict.h) on the CPU: the written
// prediction equals the model's whole-grid forward, decoded, at another grid
// than the training one, whole and in tiles; the per-sample errors are the
// evaluation's; bad runs and inputs are refused with no output left.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>
#include <fno_train/trainer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "golden.h"

using fno::test::out_path;

namespace {

const std::string kTest32 = std::string(FNO_SOURCE_DIR) + "/data/darcy/darcy_test_32.pt";

std::string small_yaml(int64_t hidden, const std::string& normalization) {
  return R"(model:
  n_modes: [8, 8]
  hidden_channels: )" +
         std::to_string(hidden) + R"(
  n_layers: 2
data:
  train_file: )" +
         std::string(FNO_SOURCE_DIR) +
         R"(/data/darcy/darcy_train_16.pt
  normalization: )" +
         normalization +
         R"(
device:
  name: cpu
)";
}

// A run directory as fno_train leaves it: config.yaml, model.pt, normalizers.pt
// (the output normalizer fitted on `fit_grid`-sized data).
struct FakeRun {
  std::string dir;
  fno::FNO model{nullptr};
  fno::data::UnitGaussianNormalizer out_norm;
};

FakeRun make_run(const std::string& name, const std::string& normalization = "channel",
                 int64_t fit_grid = 16) {
  FakeRun r;
  r.dir = out_path(name);
  std::filesystem::remove_all(r.dir);
  std::filesystem::create_directories(r.dir);
  const auto cfg = fno::parse_config(small_yaml(8, normalization), "small");
  std::ofstream(r.dir + "/config.yaml") << cfg.resolved_yaml;
  torch::manual_seed(3);
  r.model = fno::FNO(cfg.model);
  fno::save_tensor_dict(fno::state_dict(*r.model), r.dir + "/model.pt");
  r.out_norm = fno::data::UnitGaussianNormalizer(cfg.data.normalization);
  r.out_norm.fit(torch::rand({4, 1, fit_grid, fit_grid}) * 0.02 + 0.01);
  fno::TensorDict norms;
  for (const auto& [k, v] : r.out_norm.state("norm.out.")) norms.insert(k, v);
  fno::save_tensor_dict(norms, r.dir + "/normalizers.pt");
  return r;
}

double rel_max(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

std::string error_of(const fno::PredictOptions& o) {
  try {
    fno::predict(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("predict at another grid equals the whole-grid forward, decoded, whole and in tiles") {
  auto run = make_run("predict_run");
  const auto data = fno::data::load_darcy(kTest32, fno::data::LoadOptions().n_samples(8));
  torch::Tensor want;
  {
    torch::NoGradGuard no_grad;
    run.model->eval();
    want = run.out_norm.inverse_transform(run.model->forward(data.x.narrow(0, 2, 6)));
  }
  for (const int64_t tile_rows : {0, 8}) {
    CAPTURE(tile_rows);
    fno::PredictOptions o;
    o.run_dir = run.dir;
    o.input = kTest32;
    o.y_key = "y";
    o.first = 2;
    o.count = 6;
    o.batch_size = 4;
    o.device = "cpu";
    o.tile_rows = tile_rows;
    o.out = out_path("predict_" + std::to_string(tile_rows) + ".h5");
    std::filesystem::remove(o.out);
    std::filesystem::remove(fno::predict_summary_path(o.out));
    const auto r = fno::predict(o);
    CHECK(r.n_samples == 6);
    CHECK(r.grid == std::vector<int64_t>{32, 32});
    CHECK(r.normalizers == run.dir + "/normalizers.pt");
    CHECK(r.plan.find(tile_rows ? "tiles of 8 rows" : "whole grid, batches of 4") !=
          std::string::npos);
    const auto got =
        fno::data::load_hdf5(o.out, fno::data::LoadOptions().x_key("pred").y_key("pred")).x;
    REQUIRE(got.sizes() == want.sizes());
    CHECK(rel_max(got, want) <= 1e-5);
    // Each sample's error is the evaluation's loss of that sample alone.
    const fno::LpLoss l2(fno::LpLossOptions().d(2).p(2));
    REQUIRE(r.l2.size() == 6);
    double mean = 0;
    for (int64_t i = 0; i < 6; ++i) {
      const double e = l2(want.narrow(0, i, 1), data.y.narrow(0, 2 + i, 1)).item<double>();
      CHECK(r.l2[static_cast<size_t>(i)] == doctest::Approx(e).epsilon(1e-5));
      mean += e / 6;
    }
    CHECK(r.mean_l2 == doctest::Approx(mean).epsilon(1e-5));
    CHECK(std::filesystem::exists(r.summary));
    // The settings as root attributes.
    bool has_plan = false;
    for (const auto& a : fno::data::read_hdf5_attributes(o.out)) has_plan |= a.name == "plan";
    CHECK(has_plan);
  }
}

TEST_CASE("predict on a trained run equals the run's own predictions.h5 and metrics") {
  // A real run of the trainer (its normalizers fitted on the training set,
  // written to normalizers.pt), evaluated zero-shot at 32x32.
  const std::string dir = out_path("predict_trained");
  std::filesystem::remove_all(dir);
  auto cfg = fno::parse_config(small_yaml(8, "channel") + R"(training:
  epochs: 1
output:
  progress: none
)",
                               "trained", {"data.n_train=32", "data.batch_size=16"});
  cfg.data.tests.clear();
  fno::TestSetConfig t32;
  t32.file = kTest32;
  t32.n_samples = 12;
  t32.batch_size = 8;
  cfg.data.tests.push_back(t32);
  cfg.data.n_predictions = 4;
  std::map<std::string, double> metrics;
  {
    fno::Trainer trainer(cfg, dir);
    metrics = trainer.train();
  }
  REQUIRE(std::filesystem::exists(dir + "/normalizers.pt"));
  fno::PredictOptions o;
  o.run_dir = dir;
  o.input = kTest32;
  o.y_key = "y";
  o.count = 12;
  o.device = "cpu";
  o.out = out_path("predict_trained.h5");
  std::filesystem::remove(o.out);
  std::filesystem::remove(fno::predict_summary_path(o.out));
  const auto r = fno::predict(o);
  CHECK(r.normalizers == dir + "/normalizers.pt");
  CHECK(r.mean_l2 == doctest::Approx(metrics.at("32_l2")).epsilon(1e-5));
  CHECK(r.mean_h1 == doctest::Approx(metrics.at("32_h1")).epsilon(1e-5));
  const auto got =
      fno::data::load_hdf5(o.out, fno::data::LoadOptions().x_key("pred").y_key("pred")).x;
  // predictions.h5's 32/pred is [4, 1, 32, 32]: the loader reads it as a 3D grid.
  const auto ref = fno::data::load_hdf5(dir + "/predictions.h5",
                                        fno::data::LoadOptions().x_key("32/pred").y_key("32/pred"))
                       .x.reshape({4, 1, 32, 32});
  CHECK(rel_max(got.narrow(0, 0, 4), ref) <= 1e-5);
}

TEST_CASE("predict refuses bad runs and inputs with one line and leaves no output") {
  auto run = make_run("predict_bad");
  fno::PredictOptions base;
  base.run_dir = run.dir;
  base.input = kTest32;
  base.device = "cpu";
  base.out = out_path("predict_bad.h5");
  std::filesystem::remove(base.out);
  auto refused = [&](const fno::PredictOptions& o, const std::string& part) {
    const auto msg = error_of(o);
    CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK_FALSE(std::filesystem::exists(o.out));
  };

  SUBCASE("a config that does not match the weights") {
    std::ofstream(run.dir + "/config.yaml")
        << fno::parse_config(small_yaml(16, "channel"), "small").resolved_yaml;
    refused(base, "model.pt does not match");
  }
  SUBCASE("a grid smaller than the modes") {
    auto o = base;
    o.input = out_path("predict_grid4.h5");
    fno::data::write_hdf5(o.input,
                          {{"coeff", torch::rand({2, 4, 4})}, {"sol", torch::rand({2, 4, 4})}});
    refused(o, "grid 4x4 is smaller than the model's n_modes (8x8");
  }
  SUBCASE("a 3D input for a 2D model") {
    auto o = base;
    o.input = out_path("predict_3d.h5");
    fno::data::write_hdf5(o.input, {{"coeff", torch::rand({2, 8, 8, 8})}});
    refused(o, "'coeff' has 3 spatial dims; the model");
  }
  SUBCASE("a pointwise normalizer at another grid") {
    auto pw = make_run("predict_pointwise", "pointwise", 16);
    auto o = base;
    o.run_dir = pw.dir;
    refused(o, "pointwise (data.normalization) and was fitted at 16x16; it cannot apply at 32x32");
  }
  SUBCASE("a run that normalizes but has no normalizers") {
    std::filesystem::remove(run.dir + "/normalizers.pt");
    refused(base, "neither normalizers.pt nor checkpoint_latest.pt");
  }
  SUBCASE("an output that exists") {
    std::ofstream(base.out) << "keep me";
    CHECK_THROWS_AS(fno::predict(base), fno::PredictUsageError);
    std::ifstream in(base.out);
    std::string text;
    std::getline(in, text);
    CHECK(text == "keep me");
    std::filesystem::remove(base.out);
  }
}

TEST_CASE("predict_summary_path replaces the extension") {
  CHECK(fno::predict_summary_path("a/b.h5") == "a/b.summary.json");
  CHECK(fno::predict_summary_path("a.b/c") == "a.b/c.summary.json");
  CHECK(fno::predict_summary_path("out") == "out.summary.json");
}
