// The trainer on the shipped Darcy data, small and on the CPU: outputs,
// metric keys, exact resume, and a non-finite loss stopping the run.
#include <fno_train/config.h>
#include <fno_train/trainer.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>

#include <doctest/doctest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

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

TEST_CASE("training.max_grad_norm clips the steps and logs the norms per epoch") {
  // The norms before clipping, as an unclipped run measures them (a max_grad_norm above every
  // norm): the same run, and the per-epoch mean and largest.
  const auto with = [](const std::string& value) {
    return std::regex_replace(kSmall, std::regex("training:\n"),
                              "training:\n  max_grad_norm: " + value + "\n");
  };
  const auto plain = fresh_dir("run_clip_plain"), measured = fresh_dir("run_clip_measured"),
             clipped = fresh_dir("run_clip_clipped");
  const auto m_plain = fno::Trainer(fno::parse_config(kSmall, "small.yaml"), plain).train();
  const auto m_measured =
      fno::Trainer(fno::parse_config(with("1.0e+30"), "small.yaml"), measured).train();
  CHECK(m_measured == m_plain);
  const auto log = read(measured + "/metrics.jsonl");
  static const std::regex kNorms(R"("grad_norm": ([0-9.e+-]+), "grad_norm_max": ([0-9.e+-]+))");
  std::vector<double> means, maxes;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), kNorms); it != std::sregex_iterator();
       ++it) {
    means.push_back(std::stod((*it)[1].str()));
    maxes.push_back(std::stod((*it)[2].str()));
  }
  REQUIRE(means.size() == 4);  // one per epoch
  for (size_t e = 0; e < means.size(); ++e) {
    INFO("epoch ", e + 1);
    CHECK(means[e] > 0);
    CHECK(maxes[e] >= means[e]);
  }
  CHECK(read(plain + "/metrics.jsonl").find("grad_norm") == std::string::npos);
  // Clipped below every norm: each step's gradient is scaled down, so the run changes.
  const double below = *std::min_element(means.begin(), means.end()) / 4;
  const auto m_clipped =
      fno::Trainer(fno::parse_config(with(std::to_string(below)), "small.yaml"), clipped).train();
  CHECK(m_clipped.at("16_l2") != m_plain.at("16_l2"));
  CHECK(read(clipped + "/config.yaml").find("max_grad_norm") != std::string::npos);
  CHECK_THROWS_WITH(fno::parse_config(with("-1"), "small.yaml"),
                    doctest::Contains("training.max_grad_norm"));
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

// Checkpoints are written by the writer thread from a snapshot taken at the
// epoch's end: the checkpoint of epoch 3 (now checkpoint_previous.pt) must hold
// epoch 3's state although epoch 4 trained while it was written.
TEST_CASE("checkpoints written off the training thread resume exactly") {
  const auto full = fresh_dir("run_bg_full");
  fno::Trainer(fno::parse_config(kSmall, "small.yaml", {"training.checkpoint_every=1"}), full).train();
  // The last checkpoint holds the final model, bit for bit.
  const auto latest = fno::load_checkpoint_file(full + "/checkpoint_latest.pt");
  const auto model = fno::load_tensor_dict(full + "/model.pt");
  CHECK(latest["meta.epoch"].item<int64_t>() == 4);
  for (const auto& item : model) {
    INFO("model." << item.key());
    REQUIRE(latest.find("model." + item.key()) != nullptr);
    CHECK(torch::equal(latest["model." + item.key()], item.value()));
  }
  CHECK(fno::load_checkpoint_file(full + "/checkpoint_previous.pt")["meta.epoch"].item<int64_t>() == 3);
  // Resume from epoch 3's checkpoint alone (the latest removed): epoch 4 again, the same metrics.
  const auto again = fresh_dir("run_bg_again");
  REQUIRE(std::system(("cp -r '" + full + "' '" + again + "'").c_str()) == 0);
  std::remove((again + "/checkpoint_latest.pt").c_str());
  std::remove((again + "/summary.json").c_str());
  fno::Trainer resumed(fno::parse_config(kSmall, "small.yaml", {"training.checkpoint_every=1"}), again);
  CHECK(resumed.resume() == 3);
  resumed.train();
  CHECK(metrics_without_timing(again) == metrics_without_timing(full));
  CHECK(exists(again + "/summary.json"));
}

namespace {
extern "C" void ignore_signal(int) {}
}  // namespace

// SIGTERM mid-run: the step finishes, the writer writes the mid-epoch
// checkpoint and train() waits for it before throwing Interrupted; resuming
// from it ends with exactly the uninterrupted run's metrics.
TEST_CASE("a run stopped by SIGTERM waits for its checkpoint and resumes exactly") {
  const std::vector<std::string> set{"training.epochs=12", "data.n_train=128"};
  const auto full = fresh_dir("run_term_full");
  fno::Trainer(fno::parse_config(kSmall, "small.yaml", set), full).train();

  // A stray SIGTERM after train() returns must not end the test program.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = ignore_signal;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGTERM, &ignore, &old);
  const auto dir = fresh_dir("run_term");
  std::atomic<bool> running{true};
  std::thread killer([&] {
    // After the second epoch's line, at some step of the third epoch.
    while (running) {
      const auto log = read(dir + "/metrics.jsonl");
      if (std::count(log.begin(), log.end(), '\n') >= 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        ::kill(::getpid(), SIGTERM);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  bool interrupted = false;
  try {
    fno::Trainer(fno::parse_config(kSmall, "small.yaml", set), dir).train();
  } catch (const fno::Interrupted& e) {
    interrupted = true;
    CHECK(e.signal() == SIGTERM);
    CHECK(std::string(e.what()).find("checkpoint written") != std::string::npos);
  }
  running = false;
  killer.join();
  ::sigaction(SIGTERM, &old, nullptr);
  REQUIRE(interrupted);
  // On disk and whole when train() threw: no temporary file left.
  const auto ckpt = fno::load_checkpoint_file(dir + "/checkpoint_latest.pt");
  CHECK(ckpt["meta.epoch"].item<int64_t>() >= 2);
  CHECK(std::system(("ls '" + dir + "'/.*.tmp.* > /dev/null 2>&1").c_str()) != 0);
  fno::Trainer resumed(fno::parse_config(kSmall, "small.yaml", set), dir);
  resumed.resume();
  resumed.train();
  CHECK(metrics_without_timing(dir) == metrics_without_timing(full));
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
    // The loss is read at the epoch's end: nothing of the failed epoch is
    // checkpointed, and a checkpoint it names is on disk and whole.
    if (msg.find("the last good checkpoint is") != std::string::npos) {
      const auto ckpt = fno::load_checkpoint_file(dir + "/checkpoint_latest.pt");
      const auto epoch = std::stoll(msg.substr(msg.find("epoch ") + 6));
      CHECK(ckpt["meta.epoch"].item<int64_t>() == epoch - 1);
    } else {
      CHECK(msg.find("no checkpoint was written") != std::string::npos);
      CHECK(!exists(dir + "/checkpoint_latest.pt"));
    }
  }
}

TEST_CASE("a multi-channel HDF5 input trains: (N, C, R, R) as C channels of a 2D grid") {
  // Two input fields per sample (channels first) and one output with its
  // channel last; the output depends on both inputs.
  torch::manual_seed(3);
  const int64_t n = 48, r = 16;
  const auto a = torch::rand({n, 1, r, r});
  const auto b = torch::rand({n, 1, r, r});
  const auto coeff = torch::cat({a, b}, 1);                    // (N, 2, R, R)
  const auto sol = (a * b + 0.5 * a).squeeze(1).unsqueeze(3);  // (N, R, R, 1)
  const auto file = out_path("two_channels.h5");
  fno::data::write_hdf5(file, {{"coeff", coeff}, {"sol", sol}});
  const std::string yaml = R"(model:
  n_modes: [8, 8]
  in_channels: 2
  hidden_channels: 8
  n_layers: 2
data:
  train_file: )" + file + R"(
  x_layout: channels_first
  y_layout: channels_last
  n_train: 32
  batch_size: 8
  test:
    - {file: )" + file + R"(, name: own, n_samples: 16}
training:
  epochs: 10
device:
  name: cpu
output:
  progress: none
)";
  const auto dir = fresh_dir("run_two_channels");
  fno::Trainer trainer(fno::parse_config(yaml, "two.yaml"), dir);
  const auto metrics = trainer.train();
  REQUIRE(metrics.count("own_l2") == 1);
  CHECK(metrics.at("own_l2") > 0.0);
  // It learns: the last epoch's error below the first's.
  const auto log = read(dir + "/metrics.jsonl");
  const std::regex l2(R"("own_l2": ([0-9.e+-]+))");
  std::vector<double> errors;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), l2); it != std::sregex_iterator();
       ++it) {
    errors.push_back(std::stod((*it)[1]));
  }
  REQUIRE(errors.size() == 10);
  CHECK(errors.back() < 0.96 * errors.front());
  CHECK((read_h5(dir + "/predictions.h5", "own/x").sizes() == torch::IntArrayRef{4, 2, 16, 16}));
  CHECK((read_h5(dir + "/predictions.h5", "own/pred").sizes() == torch::IntArrayRef{4, 1, 16, 16}));
  // Read as grids, the arrays disagree: the error names the settings.
  CHECK_THROWS_WITH(
      fno::Trainer(fno::parse_config(yaml, "two.yaml", {"data.x_layout=grid"}), dir + "_grid"),
      doctest::Contains("set its layout (data.x_layout/y_layout)"));
  // Both (N, 2, R, R) read as grids: a 3D grid, which the 2D model names.
  const auto both = out_path("two_channels_both.h5");
  fno::data::write_hdf5(both, {{"coeff", coeff}, {"sol", coeff}});
  CHECK_THROWS_WITH(fno::Trainer(fno::parse_config(yaml, "two.yaml",
                                                   {"data.x_layout=grid", "data.y_layout=grid",
                                                    "data.train_file=" + both, "data.test=[]"}),
                                 dir + "_both"),
                    doctest::Contains("set data.x_layout: channels_first"));
  // The wrong channel count names the key to set.
  CHECK_THROWS_WITH(
      fno::Trainer(fno::parse_config(yaml, "two.yaml", {"model.in_channels=1"}), dir + "_one"),
      doctest::Contains("(set model.in_channels to 2)"));
}

TEST_CASE("an offload policy without a CUDA device: the policy that ran is the one recorded") {
  const auto dir = fresh_dir("run_offload_cpu");
  fno::Trainer trainer(fno::parse_config(kSmall, "small.yaml", {"offload.policy=all"}), dir);
  CHECK(trainer.config().offload.policy.text == "none");
  CHECK(trainer.describe().find("offload") == std::string::npos);
  trainer.dry_run();
  const auto yaml = read(dir + "/config.yaml");
  CHECK(yaml.find("\n  policy: none\n") != std::string::npos);
  fno::Trainer recompute(
      fno::parse_config(kSmall, "small.yaml", {"offload.policy=recompute+offload"}), dir + "_r");
  CHECK(recompute.config().offload.policy.text == "recompute");
  fno::Trainer kept(fno::parse_config(kSmall, "small.yaml", {"offload.policy=recompute"}),
                    dir + "_k");
  CHECK(kept.config().offload.policy.text == "recompute");
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
