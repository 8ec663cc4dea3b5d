// fno_predict's inputs and settings (issue 49): a sample's errors added up tile
// by tile (StreamedErrors) equal the evaluation's losses on the whole sample;
// errors against the truth of a streamed prediction equal the in-memory ones;
// several input files are one set of samples, streamed or not, and files that
// disagree are refused; a neuraloperator state dict's model settings given as
// --set flags (alone, or over --model-config) equal its forward.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>
#include <fno_train/train_step.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../train/src/stream_errors.h"
#include "golden.h"

using fno::test::out_path;
namespace data = fno::data;

namespace {

const std::string kTest32 = std::string(FNO_SOURCE_DIR) + "/data/darcy/darcy_test_32.pt";

// A run directory: config.yaml, model.pt, normalizers.pt (input and output).
std::string make_run(const std::string& name, const std::string& modes) {
  const std::string dir = out_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto cfg = fno::parse_config(
      "model:\n  n_modes: " + modes +
          "\n  hidden_channels: 8\n  n_layers: 3\ndata:\n  train_file: " +
          std::string(FNO_SOURCE_DIR) +
          "/data/darcy/darcy_train_16.pt\n  encode_input: true\ndevice:\n  name: cpu\n",
      "inputs");
  std::ofstream(dir + "/config.yaml") << cfg.resolved_yaml;
  torch::manual_seed(5);
  fno::FNO model(cfg.model);
  fno::save_tensor_dict(fno::state_dict(*model), dir + "/model.pt");
  data::UnitGaussianNormalizer in(cfg.data.normalization), out(cfg.data.normalization);
  const int64_t d = static_cast<int64_t>(cfg.model.n_modes().size());
  std::vector<int64_t> fit{4, 1};
  for (int64_t j = 0; j < d; ++j) fit.push_back(8);
  in.fit(torch::rand(fit) * 3 + 2);
  out.fit(torch::rand(fit) * 0.02 + 0.01);
  fno::TensorDict norms;
  for (const auto& [k, v] : out.state("norm.out.")) norms.insert(k, v);
  for (const auto& [k, v] : in.state("norm.in.")) norms.insert(k, v);
  fno::save_tensor_dict(norms, dir + "/normalizers.pt");
  return dir;
}

fno::PredictResult predict_to(fno::PredictOptions o, const std::string& name) {
  o.out = out_path(name);
  std::filesystem::remove(o.out);
  std::filesystem::remove(fno::predict_summary_path(o.out));
  return fno::predict(o);
}

std::string error_of(const fno::PredictOptions& o) {
  try {
    fno::predict(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

torch::Tensor read(const std::string& path, const std::string& key) {
  return data::load_hdf5(path, data::LoadOptions().x_key(key).y_key(key)).x;
}

// A dataset of any rank, as stored (the errors' (N, 1)).
torch::Tensor read_any(const std::string& path, const std::string& key) {
  const data::Hdf5SlabReader r(path, key, data::Hdf5SlabReader::AnyRank{});
  return r.read_box(std::vector<int64_t>(r.shape().size(), 0), r.shape());
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i]) <= tol * std::abs(want[i]));
  }
}

}  // namespace

TEST_CASE("StreamedErrors over tiles equals the evaluation's L2 and H1 of the whole sample") {
  torch::manual_seed(3);
  struct Case {
    std::vector<int64_t> shape;  // [1, C, *S]
    std::vector<int64_t> tiles;  // rows per tile, in order
  };
  for (const auto& c :
       {Case{{1, 1, 16, 12}, {5, 5, 6}}, Case{{1, 2, 9, 7}, {1, 1, 3, 4}},
        Case{{1, 1, 7, 6, 5}, {2, 1, 4}}, Case{{1, 3, 11}, {11}}, Case{{1, 1, 3, 5}, {1, 1, 1}},
        Case{{1, 1, 2, 5}, {1, 1}}, Case{{1, 1, 1, 4}, {1}}, Case{{1, 2, 6, 6}, {6}}}) {
    CAPTURE(c.shape);
    const auto x = torch::randn(c.shape, torch::kDouble);
    const auto y = torch::randn(c.shape, torch::kDouble) + 0.5;
    const int64_t d = static_cast<int64_t>(c.shape.size()) - 2;
    fno::detail::StreamedErrors e(c.shape[2]);
    int64_t r0 = 0;
    for (const int64_t rows : c.tiles) {
      e.add(r0, x.narrow(2, r0, rows).to(torch::kFloat).to(torch::kDouble), y.narrow(2, r0, rows));
      r0 += rows;
    }
    const auto v = e.finish();
    const double l2 = fno::relative_loss(fno::LossName::kL2, d)(x, y).item<double>();
    const double h1 = fno::relative_loss(fno::LossName::kH1, d)(x, y).item<double>();
    CHECK(v.l2 == doctest::Approx(l2).epsilon(1e-6));
    CHECK(v.h1 == doctest::Approx(h1).epsilon(1e-6));
    // fp64 throughout: to rounding
    fno::detail::StreamedErrors exact(c.shape[2]);
    r0 = 0;
    for (const int64_t rows : c.tiles) {
      exact.add(r0, x.narrow(2, r0, rows), y.narrow(2, r0, rows));
      r0 += rows;
    }
    CHECK(std::abs(exact.finish().h1 - h1) <= 1e-10 * h1);
    CHECK(std::abs(exact.finish().l2 - l2) <= 1e-10 * l2);
  }
  // Rows out of order, a shape that differs, rows missing: one line.
  fno::detail::StreamedErrors e(8);
  const auto t = torch::rand({1, 1, 4, 8});
  CHECK_THROWS_WITH_AS(e.add(4, t, t), doctest::Contains("rows from 4"), std::runtime_error);
  CHECK_THROWS_WITH_AS(e.add(0, t, t.narrow(3, 0, 4)), doctest::Contains("truth 1x1x4x4"),
                       std::runtime_error);
  e.add(0, t, t);
  CHECK_THROWS_WITH_AS(e.finish(), doctest::Contains("4 of 8 rows given"), std::runtime_error);
}

TEST_CASE("a streamed prediction's errors against the truth equal the in-memory ones") {
  const auto run = make_run("inputs_run2", "[8, 8]");
  struct Case {
    std::vector<int64_t> x_shape;
    int64_t tile_rows;
  };
  for (const auto& c : {Case{{3, 1, 32, 24}, 5}, Case{{2, 1, 12, 10, 8}, 5}}) {
    const bool three_d = c.x_shape.size() == 5;
    const auto r = three_d ? make_run("inputs_run3", "[4, 4, 4]") : run;
    CAPTURE(c.x_shape);
    torch::manual_seed(13);
    const auto x = torch::rand(c.x_shape) * 3 + 2;
    const auto y = torch::rand(c.x_shape) * 0.02 + 0.01;
    const std::string input = out_path(three_d ? "inputs_truth3.h5" : "inputs_truth2.h5");
    data::write_hdf5(input, {{"coeff", x.squeeze(1)}, {"sol", y.squeeze(1)}});
    fno::PredictOptions o;
    o.run_dir = r;
    o.input = input;
    o.y_key = "sol";
    o.device = "cpu";
    o.batch_size = 1;
    const auto mem = predict_to(o, "inputs_truth_mem.h5");
    CHECK_MESSAGE(mem.plan.find("whole grid") != std::string::npos, mem.plan);
    auto s = o;
    s.tile_rows = c.tile_rows;
    s.host_memory_limit = 64 << 20;
    const auto st = predict_to(s, "inputs_truth_stream.h5");
    CHECK_MESSAGE(st.plan.find("streamed in tiles of 5 rows") != std::string::npos, st.plan);
    check_close(st.l2, mem.l2, 1e-5);
    check_close(st.h1, mem.h1, 1e-5);
    CHECK(st.mean_l2 == doctest::Approx(mem.mean_l2).epsilon(1e-5));
    CHECK(st.mean_h1 == doctest::Approx(mem.mean_h1).epsilon(1e-5));
    // The output's l2 and h1 and the summary say the same.
    CHECK(fno::test::rel_err(read_any(st.out, "l2"), read_any(mem.out, "l2")) <= 1e-5);
    CHECK(fno::test::rel_err(read_any(st.out, "h1"), read_any(mem.out, "h1")) <= 1e-5);
    const auto summary = slurp(st.summary);
    CHECK(summary.find("\"n_samples\": " + std::to_string(c.x_shape[0])) != std::string::npos);
    CHECK(summary.find("\"mean_h1\": ") != std::string::npos);
    CHECK(fno::test::rel_err(read(st.out, "pred"), read(mem.out, "pred")) <= 1e-5);
  }
  // Streamed on its own: the arrays (the truth's too) do not fit the host limit.
  torch::manual_seed(9);
  const auto x = torch::rand({3, 1, 128, 96}) * 3 + 2;
  const auto y = torch::rand({3, 1, 128, 96});
  const std::string input = out_path("inputs_truth_auto.h5");
  data::write_hdf5(input, {{"coeff", x.squeeze(1)}, {"sol", y.squeeze(1)}});
  fno::PredictOptions o;
  o.run_dir = run;
  o.input = input;
  o.y_key = "sol";
  o.device = "cpu";
  o.host_memory_limit = 8000000;
  const auto st = predict_to(o, "inputs_truth_auto_stream.h5");
  CHECK_MESSAGE(st.plan.find("streamed in tiles of") != std::string::npos, st.plan);
  o.host_memory_limit = 0;
  const auto mem = predict_to(o, "inputs_truth_auto_mem.h5");
  CHECK_MESSAGE(mem.plan.find("whole grid") != std::string::npos, mem.plan);
  check_close(st.l2, mem.l2, 1e-5);
  check_close(st.h1, mem.h1, 1e-5);
  // A truth on another grid: one line, no file.
  const std::string bad = out_path("inputs_truth_bad.h5");
  data::write_hdf5(bad, {{"coeff", x.squeeze(1)}, {"sol", torch::rand({3, 128, 64})}});
  o.input = bad;
  o.out = out_path("inputs_truth_bad_out.h5");
  std::filesystem::remove(o.out);
  const auto msg = error_of(o);
  CHECK_MESSAGE(msg.find("inputs_truth_bad.h5: the truth 'sol' is 3x1x128x64 and the input "
                         "'coeff' 3x1x128x96") != std::string::npos,
                msg);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(o.out));
}

TEST_CASE("several input files are one set of samples, streamed or not") {
  const auto run = make_run("inputs_runs", "[8, 8]");
  const auto all = data::load_darcy(kTest32, data::LoadOptions().n_samples(6));
  // Three files: 2 samples in HDF5, 1 in HDF5, the first 3 of the .pt file.
  const std::string a = out_path("inputs_a.h5"), b = out_path("inputs_b.h5");
  data::write_hdf5(
      a, {{"coeff", all.x.narrow(0, 3, 2).squeeze(1)}, {"sol", all.y.narrow(0, 3, 2).squeeze(1)}});
  data::write_hdf5(
      b, {{"coeff", all.x.narrow(0, 5, 1).squeeze(1)}, {"sol", all.y.narrow(0, 5, 1).squeeze(1)}});
  fno::PredictOptions one;
  one.run_dir = run;
  one.input = kTest32;
  one.y_key = "y";
  one.device = "cpu";
  one.count = 6;
  const auto want = predict_to(one, "inputs_one.h5");
  const auto want_pred = read(want.out, "pred");

  fno::PredictOptions several = one;
  several.input.clear();
  several.count = -1;
  several.y_key = "";
  SUBCASE("HDF5 files, streamed and in memory, with the truth and a range across them") {
    several.inputs = {a, b};
    several.y_key = "sol";
    several.first = 1;
    several.count = 2;
    for (const int64_t tile_rows : {int64_t{0}, int64_t{8}}) {
      CAPTURE(tile_rows);
      several.tile_rows = tile_rows;
      const auto r = predict_to(several, "inputs_several_" + std::to_string(tile_rows) + ".h5");
      CHECK((r.plan.find("streamed") != std::string::npos) == (tile_rows > 0));
      CHECK(fno::test::rel_err(read(r.out, "pred"), want_pred.narrow(0, 4, 2)) <= 1e-5);
      check_close(r.l2, {want.l2[4], want.l2[5]}, 1e-5);
      check_close(r.h1, {want.h1[4], want.h1[5]}, 1e-5);
      const auto summary = slurp(r.summary);
      CHECK_MESSAGE(summary.find("\"inputs\": [\"" + a + "\", \"" + b + "\"]") != std::string::npos,
                    summary);
    }
  }
  SUBCASE("a .pt file and HDF5 files: read whole, every file in the attributes") {
    const std::string pt = out_path("inputs_c.pt");
    fno::TensorDict d;
    d.insert("x", all.x.narrow(0, 0, 3).squeeze(1));
    d.insert("y", all.y.narrow(0, 0, 3).squeeze(1));
    fno::save_tensor_dict(d, pt);
    several.inputs = {pt, a, b};
    several.x_key = "";
    const auto r = predict_to(several, "inputs_mixed.h5");
    CHECK(r.n_samples == 6);
    CHECK(fno::test::rel_err(read(r.out, "pred"), want_pred) <= 1e-5);
    // (a .pt and HDF5 files: their default names differ, so the keys are left to each)
    CHECK_MESSAGE(r.plan.find("whole grid") != std::string::npos, r.plan);
  }
  SUBCASE("files that disagree, and a range past them: one line naming the file, no output") {
    const std::string other = out_path("inputs_other.h5");
    data::write_hdf5(other, {{"coeff", torch::rand({2, 32, 16}) + 3}});
    several.inputs = {a, other};
    several.out = out_path("inputs_bad.h5");
    std::filesystem::remove(several.out);
    auto msg = error_of(several);
    CHECK_MESSAGE(msg.find(other + ": 'coeff' is 2x1x32x16 where " + a +
                           "'s is 2x1x32x32 (samples, channels, grid): the --input files must "
                           "agree on channels and grid") != std::string::npos,
                  msg);
    several.inputs = {a, b};
    several.first = 2;
    several.count = 2;
    msg = error_of(several);
    CHECK_MESSAGE(msg.find("--samples 2:2 asks past the 3 samples the 2 --input files hold (" + a +
                           " 2, " + b + " 1)") != std::string::npos,
                  msg);
    several.inputs = {a, several.out};
    msg = error_of(several);
    CHECK_MESSAGE(msg.find("--out is an --input file") != std::string::npos, msg);
    CHECK_FALSE(std::filesystem::exists(several.out));
  }
}

TEST_CASE("a state dict's model settings as --set flags, alone or over --model-config") {
  const auto x = fno::test::golden_tensor("fno2d_even_io.pt", "x");
  const auto want = fno::test::golden_tensor("fno2d_even_io.pt", "y");
  const std::string input = out_path("inputs_nop.h5");
  data::write_hdf5(input, {{"coeff", x.squeeze(1)}});
  fno::PredictOptions o;
  o.run_dir = fno::test::golden_path("fno2d_even_state.pt");
  o.input = input;
  o.device = "cpu";
  const auto pred_of = [](const std::string& path) {
    const auto layout = data::Layout::kChannelsFirst;
    return data::load_hdf5(
               path,
               data::LoadOptions().x_key("pred").y_key("pred").x_layout(layout).y_layout(layout))
        .x;
  };
  const std::vector<std::string> settings{"model.n_modes=[8, 6]", "model.in_channels=1",
                                          "model.out_channels=2", "model.hidden_channels=8",
                                          "model.n_layers=3"};
  SUBCASE("flags alone, whole and in tiles") {
    o.model_settings = settings;
    for (const int64_t tile_rows : {int64_t{0}, int64_t{3}}) {
      o.tile_rows = tile_rows;
      const auto r = predict_to(o, "inputs_nop_" + std::to_string(tile_rows) + ".h5");
      CHECK(fno::test::rel_err(pred_of(r.out), want) <= 1e-5);
    }
  }
  SUBCASE("flags over a YAML file whose settings differ") {
    const std::string config = out_path("inputs_nop.yaml");
    std::ofstream(config) << "model: {n_modes: [4, 4], in_channels: 1, out_channels: 2, "
                             "hidden_channels: 4, n_layers: 3}\n";
    o.model_config = config;
    o.model_settings = {"model.n_modes=[8,6]", "model.hidden_channels=8"};
    const auto r = predict_to(o, "inputs_nop_over.h5");
    CHECK(fno::test::rel_err(pred_of(r.out), want) <= 1e-5);
    // (the YAML alone does not match)
    o.model_settings.clear();
    o.out = out_path("inputs_nop_e.h5");
    std::filesystem::remove(o.out);
    CHECK(error_of(o).find("does not match " + config + "'s model") != std::string::npos);
  }
  SUBCASE("settings that do not match, or do not parse: one line, no file") {
    o.out = out_path("inputs_nop_e.h5");
    std::filesystem::remove(o.out);
    auto with = [&](std::vector<std::string> s) {
      auto p = o;
      p.model_settings = std::move(s);
      const auto msg = error_of(p);
      CHECK(msg.find('\n') == std::string::npos);
      CHECK_FALSE(std::filesystem::exists(p.out));
      return msg;
    };
    auto s = settings;
    s[3] = "model.hidden_channels=16";
    auto msg = with(s);
    CHECK_MESSAGE(msg.find("fno2d_even_state.pt does not match the --set model settings: "
                           "state_dict key '") != std::string::npos,
                  msg);
    CHECK_MESSAGE(msg.find("shape") != std::string::npos, msg);
    s = settings;
    s[0] = "model.n_modes=lots";
    msg = with(s);
    CHECK_MESSAGE(msg.find("--set model.n_modes=lots") != std::string::npos, msg);
    s.push_back("training.epochs=3");
    s[0] = settings[0];
    msg = with(s);
    CHECK_MESSAGE(
        msg.find("--set training.epochs=3: only the model's settings") != std::string::npos, msg);
    auto p = o;
    p.run_dir = out_path("");
    p.model_settings = settings;
    msg = error_of(p);
    CHECK_MESSAGE(msg.find("names a state dict file") != std::string::npos, msg);
  }
}
