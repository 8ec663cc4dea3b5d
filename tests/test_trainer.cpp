// The trainer on the shipped Darcy data, small and on the CPU: outputs,
// metric keys, exact resume, and a non-finite loss stopping the run.
#include <fno_train/config.h>
#include <fno_train/trainer.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>

#include <doctest/doctest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sys/stat.h>

#include "golden.h"

using fno::test::out_path;

namespace {

const std::string kSmall = R"(model:
  n_modes: [8, 8]
  hidden_channels: 8
  n_layers: 2
data:
  train_file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_train_16.pt
  n_train: 64
  batch_size: 16
  test:
    - {file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_test_16.pt, n_samples: 16, batch_size: 8}
    - {file: )" + std::string(FNO_SOURCE_DIR) + R"(/data/darcy/darcy_test_32.pt, n_samples: 16, batch_size: 8}
  n_predictions: 2
optimizer:
  lr: 8.0e-3
  weight_decay: 1.0e-4
scheduler:
  name: cosine
  T_max: 5
training:
  epochs: 4
device:
  name: cpu
output:
  progress: none
)";

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// metrics.jsonl without the timing fields, which differ run to run.
std::string metrics_without_timing(const std::string& dir) {
  static const std::regex kTiming(R"(, "seconds": [^,}]*)");
  return std::regex_replace(read(dir + "/metrics.jsonl"), kTiming, "");
}

// A float dataset of an HDF5 file, with its shape.
torch::Tensor read_h5(const std::string& file, const std::string& name) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  REQUIRE(d >= 0);
  const hid_t space = H5Dget_space(d);
  hsize_t dims[8];
  const int rank = H5Sget_simple_extent_dims(space, dims, nullptr);
  std::vector<int64_t> shape(dims, dims + rank);
  auto t = torch::empty(shape, torch::kFloat);
  CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) >= 0);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return t;
}

std::string fresh_dir(const std::string& name) {
  const auto dir = out_path(name);
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

}  // namespace

TEST_CASE("training writes the run directory with neuraloperator-style metric keys") {
  const auto dir = fresh_dir("run_small");
  fno::Trainer trainer(fno::parse_config(kSmall, "small.yaml"), dir);
  const auto metrics = trainer.train();
  for (const std::string k : {"16_h1", "16_l2", "32_h1", "32_l2"}) {
    INFO("metric ", k);
    REQUIRE(metrics.count(k) == 1);
    CHECK(metrics.at(k) > 0.0);
    CHECK(metrics.at(k) < 1.0);
  }
  for (const std::string f : {"config.yaml", "metrics.jsonl", "summary.json", "predictions.h5",
                              "checkpoint_latest.pt", "checkpoint_best.pt", "model.pt"}) {
    INFO("file ", f);
    CHECK(exists(dir + "/" + f));
  }
  // predictions.h5: inputs, truths and predictions of the first samples per test set.
  const auto truth = read_h5(dir + "/predictions.h5", "32/y");
  const auto pred = read_h5(dir + "/predictions.h5", "32/pred");
  CHECK((pred.sizes() == torch::IntArrayRef{2, 1, 32, 32}));
  CHECK((read_h5(dir + "/predictions.h5", "16/x").sizes() == torch::IntArrayRef{2, 1, 16, 16}));
  const double rel = ((pred - truth).norm() / truth.norm()).item<double>();
  CHECK(rel < 0.9);  // a trained model, not noise
  // model.pt holds exactly the model's parameters, under Python's names.
  CHECK(fno::load_tensor_dict(dir + "/model.pt").size() == fno::state_dict(*fno::FNO(fno::parse_config(kSmall, "s.yaml").model)).size());
  const auto log = read(dir + "/metrics.jsonl");
  CHECK(std::count(log.begin(), log.end(), '\n') == 4);
  CHECK(log.find("\"epoch\": 4, \"lr\": ") != std::string::npos);
  CHECK(log.find("\"peak_gpu_bytes\": 0") != std::string::npos);
  const auto summary = read(dir + "/summary.json");
  CHECK(summary.find("\"n_params\": " + std::to_string(trainer.n_params())) != std::string::npos);
  CHECK(summary.find("\"16_l2\": ") != std::string::npos);
}

TEST_CASE("resuming on the CPU reproduces the uninterrupted run exactly") {
  const auto full = fresh_dir("run_full");
  fno::Trainer(fno::parse_config(kSmall, "small.yaml"), full).train();

  const auto part = fresh_dir("run_part");
  fno::Trainer(fno::parse_config(kSmall, "small.yaml", {"training.epochs=2"}), part).train();
  fno::Trainer resumed(fno::parse_config(kSmall, "small.yaml"), part);
  CHECK(resumed.resume() == 2);
  resumed.train();
  CHECK(metrics_without_timing(part) == metrics_without_timing(full));
}

TEST_CASE("a non-finite loss stops the run with a clear error and keeps the last checkpoint") {
  const auto dir = fresh_dir("run_nan");
  fno::Trainer trainer(fno::parse_config(kSmall, "small.yaml", {"optimizer.lr=1e30", "training.epochs=20"}), dir);
  try {
    trainer.train();
    FAIL("training with lr 1e30 did not diverge");
  } catch (const fno::TrainingError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("the training loss is") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("dry run writes n_params and the resolved config, and trains nothing") {
  const auto dir = fresh_dir("run_dry");
  fno::Trainer trainer(fno::parse_config(kSmall, "small.yaml"), dir);
  trainer.dry_run();
  CHECK(read(dir + "/summary.json").find("\"n_params\": " + std::to_string(trainer.n_params())) !=
        std::string::npos);
  CHECK(exists(dir + "/config.yaml"));
  CHECK(!exists(dir + "/checkpoint_latest.pt"));
}

TEST_CASE("an unwritable run directory is a clear error") {
  CHECK_THROWS_WITH_AS(fno::Trainer(fno::parse_config(kSmall, "small.yaml"), "/proc/fno_run"),
                       doctest::Contains("/proc/fno_run: cannot create the run directory"),
                       std::runtime_error);
}
