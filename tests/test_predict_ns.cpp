// fno_predict's engine on Navier-Stokes runs, on the CPU: a tiny run of the
// trainer in each mode (the recurrent FNO-2D rolled out, the space-time
// FNO-3D), then predict() on its test file. Each sample's relative L2 is the
// evaluation's: their mean is the run's ns_l2, the per-record means its
// ns/l2_per_step, the first samples' errors those of the run's own
// predictions.h5 (its pred and y), and the prediction equals that pred. The
// errors from a band's squared norms (fno_predict --domain-parallel) equal them.
#include <fno_data/darcy.h>
#include <fno_data/navier_stokes_gen.h>
#include <fno_engine/rollout.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>
#include <fno_train/trainer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "../train/src/predict_ns.h"
#include "golden.h"

using fno::test::out_path;

namespace {

// 16^2, records every 0.1 up to 0.6 (6 records: 3 in, 3 out); 10 training and
// 6 test samples; made once per process, in a folder of its own.
std::string ns_stem() {
  static const std::string stem = [] {
    const std::string dir = out_path("predict_ns_data." + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    fno::data::generate_navier_stokes(fno::data::NavierStokesGenOptions()
                                          .resolution(16)
                                          .samples(16)
                                          .test_samples(6)
                                          .seed(2)
                                          .viscosity(1e-3)
                                          .dt(1e-2)
                                          .t_final(0.6)
                                          .record_every(0.1)
                                          .device("cpu")
                                          .out(dir + "/ns.h5"));
    return dir + "/ns";
  }();
  return stem;
}

std::string ns_config(bool recurrent) {
  const std::string stem = ns_stem();
  return std::string("model:\n  n_modes: ") + (recurrent ? "[6, 6]" : "[6, 6, 2]") +
         "\n  in_channels: 3\n  hidden_channels: 8\n  n_layers: 2\n" +
         (recurrent ? "" : "  domain_padding: [0, 0, 0.34]\n") +
         "data:\n  problem: ns\n  ns_mode: " + (recurrent ? "recurrent" : "space_time") +
         "\n  t_in: 3\n  t_out: 3\n  train_file: " + stem +
         "_train.h5\n  n_train: 10\n  batch_size: 4\n  encode_input: " +
         (recurrent ? "false" : "true") + "\n  encode_output: " + (recurrent ? "false" : "true") +
         "\n  test:\n    - {file: " + stem +
         "_test.h5, name: ns, batch_size: 4}\n  n_predictions: 2\n"
         "optimizer:\n  lr: 5.0e-3\nscheduler:\n  name: none\n"
         "training:\n  epochs: 2\n  loss: l2\n  eval_losses: [l2]\n"
         "device:\n  name: cpu\noutput:\n  progress: none\n";
}

torch::Tensor read_set(const std::string& file, const std::string& key) {
  return fno::data::load_hdf5(file, fno::data::LoadOptions().x_key(key).y_key(key)).x.squeeze(1);
}

// The last metrics line's "ns_l2_per_step": the final model's error per record.
std::vector<double> last_per_step(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  static const std::regex kList(R"("ns_l2_per_step": \[([^\]]*)\])");
  std::smatch m;
  std::vector<double> out;
  if (!std::regex_search(last, m, kList)) return out;
  std::stringstream list(m[1].str());
  for (std::string item; std::getline(list, item, ',');) out.push_back(std::stod(item));
  return out;
}

fno::PredictOptions request(const std::string& run, const std::string& name) {
  fno::PredictOptions o;
  o.run_dir = run;
  o.input = ns_stem() + "_test.h5";
  o.device = "cpu";
  o.batch_size = 3;  // not the run's 4: errors are per sample
  o.progress = "none";
  o.out = out_path(name + ".h5");
  std::filesystem::remove(o.out);
  std::filesystem::remove(fno::predict_summary_path(o.out));
  return o;
}

}  // namespace

TEST_CASE("predict on a Navier-Stokes run gives the evaluation's errors, per sample and record") {
  for (const bool recurrent : {true, false}) {
    const std::string mode = recurrent ? "recurrent" : "space_time";
    INFO("mode " << mode);
    const auto dir = out_path("predict_ns_run_" + mode);
    std::filesystem::remove_all(dir);
    std::map<std::string, double> metrics;
    {
      fno::Trainer trainer(fno::parse_config(ns_config(recurrent), "ns.yaml"), dir);
      metrics = trainer.train();
    }
    auto o = request(dir, "predict_ns_" + mode);
    o.y_key = "u";
    const auto r = fno::predict(o);
    CHECK(r.n_samples == 6);
    REQUIRE(r.l2.size() == 6);
    CHECK(r.plan.find("6 sample(s) at " + std::string(recurrent ? "16x16:" : "16x16x3:")) !=
          std::string::npos);
    // The mean over the set is the evaluation's ns_l2; per record, its ns/l2_per_step.
    CHECK(r.mean_l2 == doctest::Approx(metrics.at("ns_l2")).epsilon(1e-5));
    const auto per_step = last_per_step(dir);
    REQUIRE(per_step.size() == 3);
    REQUIRE(r.l2_per_record.size() == 3);
    for (size_t t = 0; t < 3; ++t) {
      CHECK(r.l2_per_record[t] == doctest::Approx(per_step[t]).epsilon(1e-5));
    }
    const auto preds = dir + "/predictions.h5";
    // The first two samples: the run's own prediction and truth, as trajectories [2, 3, 16, 16].
    const auto run_pred = read_set(preds, "ns/pred"), run_y = read_set(preds, "ns/y");
    REQUIRE(run_pred.sizes() == torch::IntArrayRef({2, 3, 16, 16}));
    const auto got = read_set(o.out, "pred");
    REQUIRE(got.sizes() == torch::IntArrayRef({6, 3, 16, 16}));
    CHECK(fno::test::rel_err(got.narrow(0, 0, 2), run_pred) <= 1e-5);
    for (int64_t i = 0; i < 2; ++i) {
      const double want =
          fno::trajectory_rel_l2(run_pred.narrow(0, i, 1), run_y.narrow(0, i, 1)).item<double>();
      CHECK(r.l2[static_cast<size_t>(i)] == doctest::Approx(want).epsilon(1e-5));
    }
    // The input records alone (no truth): the same prediction; a range of it.
    auto x_only = request(dir, "predict_ns_x_" + mode);
    x_only.first = 2;
    x_only.count = 3;
    const auto rx = fno::predict(x_only);
    CHECK(rx.l2.empty());
    CHECK(fno::test::rel_err(read_set(x_only.out, "pred"), got.narrow(0, 2, 3)) <= 1e-6);
  }
}

TEST_CASE(
    "predict on a Navier-Stokes run: tiles of the rollout's steps, and refusals in one line") {
  const auto dir = out_path("predict_ns_run_tiles");
  std::filesystem::remove_all(dir);
  fno::Trainer(fno::parse_config(ns_config(true), "ns.yaml", {"training.epochs=1"}), dir).train();
  // Each step of the rollout in tiles of 4 rows: the whole grid's errors.
  auto whole = request(dir, "predict_ns_whole");
  whole.y_key = "u";
  const auto rw = fno::predict(whole);
  auto tiles = request(dir, "predict_ns_tiles");
  tiles.y_key = "u";
  tiles.tile_rows = 4;
  const auto rt = fno::predict(tiles);
  CHECK(rt.plan.find("tiles of 4 rows (forced)") != std::string::npos);
  CHECK(fno::test::rel_err(read_set(tiles.out, "pred"), read_set(whole.out, "pred")) <= 1e-5);
  CHECK(rt.mean_l2 == doctest::Approx(rw.mean_l2).epsilon(1e-5));
  // Several files (the same file twice): one set of 12 samples, a range across them.
  auto two = request(dir, "predict_ns_two");
  two.y_key = "u";
  two.inputs = {two.input, two.input};
  two.input.clear();
  two.first = 4;
  two.count = 4;
  const auto r2 = fno::predict(two);
  REQUIRE(r2.l2.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(r2.l2[i] == doctest::Approx(rw.l2[(4 + i) % 6]).epsilon(1e-5));
  }
  const auto whole_pred = read_set(whole.out, "pred");
  CHECK(fno::test::rel_err(read_set(two.out, "pred"),
                           torch::cat({whole_pred.narrow(0, 4, 2), whole_pred.narrow(0, 0, 2)})) <=
        1e-5);
  two.first = 10;
  two.count = 4;
  two.out = out_path("predict_ns_two_bad.h5");
  CHECK_THROWS_WITH_AS(fno::predict(two),
                       doctest::Contains("--samples 10:4 asks past the 12 samples the 2 --input"),
                       fno::PredictUsageError);
  // Refusals: one line, no output.
  auto o = request(dir, "predict_ns_bad");
  o.first = 5;
  o.count = 4;
  CHECK_THROWS_WITH_AS(fno::predict(o), doctest::Contains("--samples 5:4 asks past the 6 samples"),
                       fno::PredictUsageError);
  o = request(dir, "predict_ns_bad");
  o.x_key = "a";  // the initial vorticity (N, R, R), not records
  CHECK_THROWS_WITH(fno::predict(o),
                    doctest::Contains("dataset 'a' has rank 3, expected (N, R, R, T) records"));
  CHECK(!std::filesystem::exists(o.out));
}

// NsPrediction::band_errors from one band of the whole grid (the sums that a
// sample's ranks add up under fno_predict --domain-parallel) gives errors()'s
// values in both modes: the trajectory's L2 (recurrent) or the L2 over
// (x, y, t), the H1, and each record's L2.
TEST_CASE("predict on a Navier-Stokes run: errors from a band's squared norms equal the losses'") {
  for (const bool recurrent : {true, false}) {
    CAPTURE(recurrent);
    const fno::detail::NsPrediction ns(fno::parse_config(ns_config(recurrent), "ns"));
    torch::manual_seed(3);
    // [b, t_out, R, R'] (recurrent) or [b, 1, R, R', t_out]
    const std::vector<int64_t> shape =
        recurrent ? std::vector<int64_t>{4, 3, 12, 10} : std::vector<int64_t>{4, 1, 12, 10, 3};
    const auto y = torch::randn(shape);
    const auto out = y + 0.3 * torch::randn(shape);
    fno::Band band;  // (one rank: the whole grid, its halo the periodic wrap)
    band.grid_rows = 12;
    const auto whole = ns.errors(out, y);
    const auto banded = ns.band_errors(band, 12, out, y);
    REQUIRE(banded.per_record.sizes() == whole.per_record.sizes());
    CHECK(torch::allclose(banded.l2, whole.l2, 1e-5, 0.0));
    CHECK(torch::allclose(banded.h1, whole.h1, 1e-5, 0.0));
    CHECK(torch::allclose(banded.per_record, whole.per_record, 1e-5, 0.0));
  }
}
