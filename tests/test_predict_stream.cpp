// Streamed prediction (issue 49): the HDF5 hyperslab reader returns what
// reading the whole array and slicing gives; the band writer's rows read back;
// a prediction streamed tile by tile (input rows read per tile, output rows
// written per tile, block inputs kept or remade under a host memory limit)
// equals the whole-grid forward in 2D and 3D, and the in-memory tiled path
// value for value; limits under the floor and unwritable outputs are refused
// with one line and no file. A released writer's file takes other writers'
// rows in turn (domain-parallel fno_predict).
#include <fno/fno.h>
#include <fno/serialize.h>
#include <fno/tiled.h>
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/resource.h>

#include "golden.h"

using fno::test::check_one_line_error;
using fno::test::out_path;
using fno::test::write_bytes;
namespace data = fno::data;

namespace {

const std::string kTest32 = std::string(FNO_SOURCE_DIR) + "/data/darcy/darcy_test_32.pt";

std::string yaml(const std::string& modes, const std::string& normalization = "channel") {
  return "model:\n  n_modes: " + modes +
         "\n  hidden_channels: 8\n  n_layers: 3\ndata:\n  train_file: " +
         std::string(FNO_SOURCE_DIR) +
         "/data/darcy/darcy_train_16.pt\n  encode_input: true\n  normalization: " + normalization +
         "\ndevice:\n  name: cpu\n";
}

// A run directory: config.yaml, model.pt, normalizers.pt (input and output).
struct Run {
  std::string dir;
  fno::FNO model{nullptr};
  data::UnitGaussianNormalizer in_norm, out_norm;
};

Run make_run(const std::string& name, const std::string& modes,
             const std::vector<int64_t>& fit_shape, const std::string& normalization = "channel") {
  Run r;
  r.dir = out_path(name);
  std::filesystem::remove_all(r.dir);
  std::filesystem::create_directories(r.dir);
  const auto cfg = fno::parse_config(yaml(modes, normalization), "stream");
  std::ofstream(r.dir + "/config.yaml") << cfg.resolved_yaml;
  torch::manual_seed(5);
  r.model = fno::FNO(cfg.model);
  r.model->eval();
  fno::save_tensor_dict(fno::state_dict(*r.model), r.dir + "/model.pt");
  r.in_norm = data::UnitGaussianNormalizer(cfg.data.normalization);
  r.out_norm = data::UnitGaussianNormalizer(cfg.data.normalization);
  r.in_norm.fit(torch::rand(fit_shape) * 3 + 2);
  r.out_norm.fit(torch::rand(fit_shape) * 0.02 + 0.01);
  fno::TensorDict norms;
  for (const auto& [k, v] : r.out_norm.state("norm.out.")) norms.insert(k, v);
  for (const auto& [k, v] : r.in_norm.state("norm.in.")) norms.insert(k, v);
  fno::save_tensor_dict(norms, r.dir + "/normalizers.pt");
  return r;
}

// The run's prediction by the model's whole-grid forward, as predict() decodes it.
torch::Tensor whole_grid(const Run& run, const fno::RunConfig& cfg, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  auto in = cfg.data.encode_input ? run.in_norm.transform(x) : x;
  auto model = run.model;  // (a holder: the same module)
  auto out = model->forward(in);
  return cfg.data.encode_output ? run.out_norm.inverse_transform(out) : out;
}

double rel_max(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

torch::Tensor read_pred(const std::string& path) {
  return data::load_hdf5(path, data::LoadOptions().x_key("pred").y_key("pred")).x;
}

fno::PredictResult predict_to(fno::PredictOptions o, const std::string& name) {
  o.out = out_path(name);
  std::filesystem::remove(o.out);
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

}  // namespace

TEST_CASE("Hdf5SlabReader returns the loader's whole array, sliced, in each layout") {
  const std::string path = out_path("slab.h5");
  torch::manual_seed(1);
  const auto grid = torch::rand({3, 10, 6});
  const auto first = torch::rand({3, 2, 10, 6});
  const auto last = torch::rand({3, 10, 6, 2});
  const auto grid3 = torch::rand({2, 5, 4, 3}).to(torch::kDouble);
  data::write_hdf5(path, {{"g", grid}, {"cf", first}, {"cl", last}, {"g3", grid3}});
  struct Case {
    std::string key;
    data::Layout layout;
  };
  for (const auto& c : {Case{"g", data::Layout::kGrid}, Case{"cf", data::Layout::kChannelsFirst},
                        Case{"cl", data::Layout::kChannelsLast}, Case{"g3", data::Layout::kGrid}}) {
    CAPTURE(c.key);
    const auto whole =
        data::load_hdf5(
            path,
            data::LoadOptions().x_key(c.key).y_key(c.key).x_layout(c.layout).y_layout(c.layout))
            .x;
    data::Hdf5SlabReader reader(path, c.key, c.layout);
    CHECK(reader.shape() == whole.sizes().vec());
    const int64_t rows = whole.size(2), n = whole.size(0);
    for (const auto& [s0, s1, r0, r1] :
         std::vector<std::array<int64_t, 4>>{{0, n, 0, rows}, {1, 2, 2, 3}, {1, n, 1, rows}}) {
      const auto part = reader.read(s0, s1, r0, r1);
      CHECK(torch::equal(part, whole.narrow(0, s0, s1 - s0).narrow(2, r0, r1 - r0)));
    }
  }
  data::Hdf5SlabReader reader(path, "g");
  const auto outside = [&] {
    try {
      reader.read(0, 1, 4, 11);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(outside.rfind(path + ": dataset 'g': samples [0, 1) x rows [4, 11) outside", 0) == 0);
  CHECK_THROWS_WITH_AS(data::Hdf5SlabReader(path, "nope"), doctest::Contains("no dataset 'nope'"),
                       std::runtime_error);
  // What is not a file: one line naming the path, from either constructor.
  const std::string empty = out_path("slab_empty.h5");
  write_bytes(empty, "");
  for (const auto& c : std::vector<std::pair<std::string, std::string>>{
           {out_path("slab_missing.h5"), "no such file"},
           {out_path(""), "is a directory"},
           {empty, "empty file"}}) {
    const std::string bad = c.first;
    check_one_line_error([&] { data::Hdf5SlabReader(bad, "g"); }, bad, c.second);
    check_one_line_error([&] { data::Hdf5SlabReader(bad, "g", data::Hdf5SlabReader::AnyRank{}); },
                         bad, c.second);
  }
}

TEST_CASE("Hdf5SampleWriter writes bands of rows into chunks of bands") {
  const std::string path = out_path("bands.h5");
  std::filesystem::remove(path);
  const auto want = torch::rand({2, 3, 10, 6});
  for (const bool compress : {true, false}) {
    CAPTURE(compress);
    std::filesystem::remove(path);
    {
      data::Hdf5SampleWriter w(
          path, {{"p", {2, 3, 10, 6}}},
          data::SampleWriterOptions().band_rows(4).band_dim(2).compress(compress));
      for (int64_t s = 0; s < 2; ++s) {
        for (int64_t r0 = 0; r0 < 10; r0 += 4) {
          const int64_t rows = std::min<int64_t>(4, 10 - r0);
          w.write_rows("p", s, 2, r0, want.narrow(0, s, 1).narrow(2, r0, rows));
        }
      }
      CHECK_THROWS_WITH_AS(w.write_rows("p", 0, 2, 8, want.narrow(0, 0, 1).narrow(2, 0, 4)),
                           doctest::Contains("rows [8, 12) outside (2, 3, 10, 6)"),
                           std::runtime_error);
      w.commit();
    }
    const auto got = data::load_hdf5(path, data::LoadOptions()
                                               .x_key("p")
                                               .y_key("p")
                                               .x_layout(data::Layout::kChannelsFirst)
                                               .y_layout(data::Layout::kChannelsFirst))
                         .x;
    CHECK(torch::equal(got, want));
  }
}

TEST_CASE("Hdf5SampleWriter: a released file takes others' rows in turn, then commits") {
  const std::string path = out_path("turns.h5");
  const auto want = torch::rand({2, 3, 10, 6});
  for (const bool compress : {true, false}) {
    CAPTURE(compress);
    std::filesystem::remove(path);
    std::string temp;
    {
      data::Hdf5SampleWriter w(path, {{"p", {2, 3, 10, 6}}, {"e", {2, 1}}},
                               data::SampleWriterOptions().compress(compress));
      w.write_rows("p", 0, 2, 0, want.narrow(2, 0, 3));
      temp = w.release();
      CHECK(std::filesystem::exists(temp));
      CHECK_FALSE(std::filesystem::exists(path));
      CHECK_THROWS_WITH_AS(w.write("e", 0, torch::ones({2, 1})),
                           doctest::Contains("write after release"), std::runtime_error);
      // Two "ranks" write rows [3, 7) and [7, 10), one after the other.
      for (const auto& [r0, rows] : {std::pair<int64_t, int64_t>{3, 4}, {7, 3}}) {
        auto j = data::Hdf5SampleWriter::join(temp, {"p", "e"});
        j->write_rows("p", 0, 2, r0, want.narrow(2, r0, rows));
        if (r0 == 7) j->write("e", 0, torch::full({2, 1}, 5.0));
        CHECK_THROWS_WITH_AS(j->commit(), doctest::Contains("its maker commits it"),
                             std::runtime_error);
        CHECK(j->release() == temp);
      }
      CHECK(std::filesystem::exists(temp));  // a joined writer never removes it
      w.commit({});
    }
    CHECK_FALSE(std::filesystem::exists(temp));
    const auto got = data::load_hdf5(path, data::LoadOptions()
                                               .x_key("p")
                                               .y_key("p")
                                               .x_layout(data::Layout::kChannelsFirst)
                                               .y_layout(data::Layout::kChannelsFirst))
                         .x;
    CHECK(torch::equal(got, want));
  }
  // Not committed: the maker's destructor removes the released file.
  std::string temp;
  {
    data::Hdf5SampleWriter w(path + ".2", {{"p", {1, 4, 4}}});
    temp = w.release();
  }
  CHECK_FALSE(std::filesystem::exists(temp));
  CHECK_FALSE(std::filesystem::exists(path + ".2"));
  CHECK_THROWS_WITH_AS(data::Hdf5SampleWriter::join(out_path("none.h5"), {"p"}),
                       doctest::Contains("none.h5: cannot open the HDF5 file for writing"),
                       std::runtime_error);
}

TEST_CASE("Hdf5SampleWriter: a write over the file-size limit fails in one line, leaving no file") {
  // 4 MiB of noise, a sample at a time, under a 256 KiB file-size limit with
  // SIGXFSZ ignored (as fno_predict does): the chunks HDF5's cache hands to the
  // file fail with EFBIG partway (an uncompressed chunk), or at the commit's
  // flush (deflated chunks, held in the cache).
  struct FileSizeLimit {
    rlimit old{};
    void (*old_handler)(int) = nullptr;
    explicit FileSizeLimit(rlim_t bytes) {
      ::getrlimit(RLIMIT_FSIZE, &old);
      old_handler = std::signal(SIGXFSZ, SIG_IGN);
      rlimit lower = old;
      lower.rlim_cur = bytes;
      ::setrlimit(RLIMIT_FSIZE, &lower);
    }
    ~FileSizeLimit() {
      ::setrlimit(RLIMIT_FSIZE, &old);
      std::signal(SIGXFSZ, old_handler);
    }
  };
  const std::string path = out_path("efbig.h5");
  const auto dir = std::filesystem::path(path).parent_path();
  auto leftovers = [&] {
    int found = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      found += e.path().filename().string().find("efbig.h5") != std::string::npos;
    }
    return found;
  };
  for (const bool compress : {false, true}) {
    CAPTURE(compress);
    std::filesystem::remove(path);
    std::string message;
    int64_t written = 0;
    {
      FileSizeLimit limit(256 << 10);
      try {
        data::Hdf5SampleWriter w(path, {{"pred", {4, 512, 512}}},
                                 data::SampleWriterOptions().compress(compress));
        for (; written < 4; ++written) w.write("pred", written, torch::randn({1, 512, 512}));
        w.commit();
      } catch (const std::exception& e) {
        message = e.what();
      }
    }
    CHECK(message.find(path + ": cannot ") == 0);
    CHECK(message.find("File too large") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    if (!compress) CHECK(written < 4);  // partway
    CHECK(leftovers() == 0);
  }
  // HDF5 goes on after it: the next file is written whole.
  {
    data::Hdf5SampleWriter w(path, {{"pred", {1, 4, 4}}});
    w.write("pred", 0, torch::ones({1, 4, 4}));
    w.commit();
  }
  CHECK(std::filesystem::exists(path));
}

TEST_CASE("a streamed prediction equals the whole-grid forward (2D), and the in-memory tiles") {
  const auto run = make_run("stream_run2", "[8, 8]", {4, 1, 16, 16});
  const auto cfg = fno::load_config(run.dir + "/config.yaml");
  const auto x = data::load_darcy(kTest32, data::LoadOptions().n_samples(4)).x;
  const std::string input = out_path("stream_in2.h5");
  data::write_hdf5(input, {{"coeff", x.squeeze(1)}});
  const auto want = whole_grid(run, cfg, x.narrow(0, 1, 3));

  fno::PredictOptions o;
  o.run_dir = run.dir;
  o.input = input;
  o.device = "cpu";
  o.first = 1;
  o.count = 3;
  o.tile_rows = 8;
  struct Case {
    int64_t host_limit;
    std::string plan;
  };
  // (the estimate on the CPU: 2.1 MB of streaming for tiles of 8 rows and
  // HDF5's caches, 98 KB of tiles' work, 66 KB to keep the latest block input,
  // 4 KB the input)
  for (const auto& c :
       {Case{0, "block inputs the latest on the CPU, input read from the file per sweep"},
        Case{2300000, "block inputs the latest on the CPU"},
        Case{2210000, "block inputs remade per tile from the model input, input kept in host"},
        Case{2202000,
             "remade per tile from the model input, input read from the file per sweep"}}) {
    CAPTURE(c.host_limit);
    o.host_memory_limit = c.host_limit;
    const auto r = predict_to(o, "stream2_" + std::to_string(c.host_limit) + ".h5");
    CHECK_MESSAGE(r.plan.find("streamed in tiles of 8 rows") != std::string::npos, r.plan);
    CHECK_MESSAGE(r.plan.find(c.plan) != std::string::npos, r.plan);
    const auto got = read_pred(r.out);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(rel_max(got, want) <= 1e-5);
  }
  // The same tiles over the arrays in memory (a .pt input is not streamed):
  // value for value.
  auto mem = o;
  mem.input = kTest32;
  mem.host_memory_limit = 0;
  mem.batch_size = 1;
  const auto in_memory = predict_to(mem, "stream2_memory.h5");
  CHECK(in_memory.plan.find("tiles of 8 rows (forced)") != std::string::npos);
  CHECK(torch::equal(read_pred(in_memory.out), read_pred(out_path("stream2_0.h5"))));
  // Whole arrays, under a host limit that holds them: not streamed.
  auto whole = o;
  whole.tile_rows = 0;
  whole.host_memory_limit = 100000000;
  const auto w = predict_to(whole, "stream2_whole.h5");
  CHECK(w.plan.find("whole grid") != std::string::npos);
  CHECK(rel_max(read_pred(w.out), want) <= 1e-5);
}

TEST_CASE("pointwise normalizers apply per tile at the training grid, and are refused at another") {
  const auto run = make_run("stream_pointwise", "[8, 8]", {4, 1, 16, 16}, "pointwise");
  const auto cfg = fno::load_config(run.dir + "/config.yaml");
  torch::manual_seed(11);
  const auto x = torch::rand({2, 1, 16, 16}) * 3 + 2;
  const std::string input = out_path("stream_pw16.h5");
  data::write_hdf5(input, {{"coeff", x.squeeze(1)}});
  fno::PredictOptions o;
  o.run_dir = run.dir;
  o.input = input;
  o.device = "cpu";
  o.tile_rows = 5;
  const auto r = predict_to(o, "stream_pw16_out.h5");
  CHECK_MESSAGE(r.plan.find("streamed in tiles of 5 rows") != std::string::npos, r.plan);
  CHECK(rel_max(read_pred(r.out), whole_grid(run, cfg, x)) <= 1e-5);
  o.input = out_path("stream_pw32.h5");
  data::write_hdf5(o.input, {{"coeff", torch::rand({2, 32, 32}) + 2}});
  o.out = out_path("stream_pw32_out.h5");
  std::filesystem::remove(o.out);
  const auto msg = error_of(o);
  CHECK_MESSAGE(msg.find("was fitted at 16x16; it cannot apply at 32x32") != std::string::npos,
                msg);
  CHECK_FALSE(std::filesystem::exists(o.out));
}

TEST_CASE("an HDF5 input whose arrays do not fit the host limit is streamed on its own") {
  const auto run = make_run("stream_run_auto", "[8, 8]", {4, 1, 16, 16});
  const auto cfg = fno::load_config(run.dir + "/config.yaml");
  torch::manual_seed(9);
  const auto x = torch::rand({3, 1, 128, 96}) * 3 + 2;
  const std::string input = out_path("stream_in_auto.h5");
  data::write_hdf5(input, {{"coeff", x.squeeze(1)}});
  fno::PredictOptions o;
  o.run_dir = run.dir;
  o.input = input;
  o.device = "cpu";
  // (whole: about 10 MB on the CPU, the forward's hidden tensors included;
  // streamed: about 8 MB at most)
  o.host_memory_limit = 8000000;
  const auto r = predict_to(o, "stream_auto.h5");
  CHECK_MESSAGE(r.plan.find("streamed in tiles of") != std::string::npos, r.plan);
  CHECK(rel_max(read_pred(r.out), whole_grid(run, cfg, x)) <= 1e-5);
  o.host_memory_limit = 0;
  const auto w = predict_to(o, "stream_auto_whole.h5");
  CHECK_MESSAGE(w.plan.find("whole grid") != std::string::npos, w.plan);
  CHECK(rel_max(read_pred(w.out), read_pred(r.out)) <= 1e-5);
}

TEST_CASE("a streamed prediction equals the whole-grid forward (3D, a short last tile)") {
  const auto run = make_run("stream_run3", "[4, 4, 4]", {3, 1, 12, 12, 12});
  const auto cfg = fno::load_config(run.dir + "/config.yaml");
  torch::manual_seed(7);
  const auto x = torch::rand({2, 1, 12, 10, 8}) * 3 + 2;
  const std::string input = out_path("stream_in3.h5");
  data::write_hdf5(input, {{"coeff", x.squeeze(1)}});
  const auto want = whole_grid(run, cfg, x);
  fno::PredictOptions o;
  o.run_dir = run.dir;
  o.input = input;
  o.device = "cpu";
  o.tile_rows = 5;
  for (const int64_t limit : {int64_t{0}, int64_t{2300000}}) {
    CAPTURE(limit);
    o.host_memory_limit = limit;
    const auto r = predict_to(o, "stream3_" + std::to_string(limit) + ".h5");
    CHECK_MESSAGE(
        r.plan.find(limit ? "remade per tile" : "the latest on the CPU") != std::string::npos,
        r.plan);
    const auto got = read_pred(r.out);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(rel_max(got, want) <= 1e-5);
  }
}

TEST_CASE("streamed prediction refuses limits under the floor and unwritable outputs") {
  const auto run = make_run("stream_bad", "[8, 8]", {4, 1, 16, 16});
  const std::string input = out_path("stream_bad_in.h5");
  data::write_hdf5(input, {{"coeff", torch::rand({2, 32, 32}) + 3}});
  fno::PredictOptions o;
  o.run_dir = run.dir;
  o.input = input;
  o.device = "cpu";
  o.tile_rows = 8;
  o.out = out_path("stream_bad.h5");
  std::filesystem::remove(o.out);
  auto refused = [&](const fno::PredictOptions& p, const std::string& part) {
    const auto msg = error_of(p);
    CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK_FALSE(std::filesystem::exists(p.out));
  };
  SUBCASE("a host limit under the floor of streaming") {
    auto p = o;
    p.host_memory_limit = 1000000;
    refused(p, "is under the floor: streaming one sample in tiles of 8 rows needs about");
  }
  SUBCASE("a host limit too small for a .pt input held whole") {
    auto p = o;
    p.input = kTest32;
    p.tile_rows = 0;
    p.host_memory_limit = 100000;
    refused(p, "the input and output held whole need about");
  }
  SUBCASE("an output in a directory that does not exist") {
    auto p = o;
    p.out = out_path("no_such_dir/x.h5");
    refused(p, "no_such_dir");
  }
  SUBCASE("an output where a directory stands") {
    auto p = o;
    p.out = out_path("stream_bad_dir.h5");
    std::filesystem::create_directories(p.out);
    const auto msg = error_of(p);
    CHECK(!msg.empty());
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(std::filesystem::is_directory(p.out));
  }
  // No temporary file is left beside the outputs.
  for (const auto& e : std::filesystem::directory_iterator(out_path(""))) {
    CHECK_MESSAGE(e.path().filename().string().rfind(".stream_bad", 0) != 0, e.path().string());
  }
}

TEST_CASE("fno_predict on a neuraloperator 2.0.0 state dict equals neuraloperator's forward") {
  struct Case {
    std::string name, model;
  };
  // tests/golden: FNO(**kwargs).state_dict() and its forward, by the real package.
  for (const auto& c : {Case{"fno2d_even",
                             "{n_modes: [8, 6], in_channels: 1, out_channels: 2, "
                             "hidden_channels: 8, n_layers: 3}"},
                        Case{"fno3d_even",
                             "{n_modes: [4, 4, 4], in_channels: 1, out_channels: 1, "
                             "hidden_channels: 4, n_layers: 2}"},
                        Case{"seed",
                             "{n_modes: [16, 16], in_channels: 1, out_channels: 1, "
                             "hidden_channels: 32, projection_channel_ratio: 2}"}}) {
    CAPTURE(c.name);
    const auto x = fno::test::golden_tensor(c.name + "_io.pt", "x");
    const auto want = fno::test::golden_tensor(c.name + "_io.pt", "y");
    const std::string input = out_path("nop_" + c.name + ".h5");
    data::write_hdf5(input, {{"coeff", x.squeeze(1)}});
    const std::string config = out_path("nop_" + c.name + ".yaml");
    std::ofstream(config) << "model: " << c.model << "\n";
    fno::PredictOptions o;
    o.run_dir = fno::test::golden_path(c.name + "_state.pt");
    o.model_config = config;
    o.input = input;
    o.device = "cpu";
    for (const int64_t tile_rows : {int64_t{0}, int64_t{3}}) {
      CAPTURE(tile_rows);
      o.tile_rows = tile_rows;
      const auto r = predict_to(o, "nop_" + c.name + "_" + std::to_string(tile_rows) + ".h5");
      CHECK(r.normalizers.empty());
      const auto layout = want.size(1) > 1 ? data::Layout::kChannelsFirst : data::Layout::kGrid;
      const auto got =
          data::load_hdf5(
              r.out,
              data::LoadOptions().x_key("pred").y_key("pred").x_layout(layout).y_layout(layout))
              .x;
      REQUIRE(got.sizes() == want.sizes());
      CHECK(fno::test::rel_err(got, want) <= 1e-5);
    }
  }
  // A config that does not match the state dict: one line naming both.
  fno::PredictOptions o;
  o.run_dir = fno::test::golden_path("fno2d_even_state.pt");
  o.model_config = out_path("nop_fno3d_even.yaml");
  o.input = out_path("nop_fno2d_even.h5");
  o.device = "cpu";
  o.out = out_path("nop_mismatch.h5");
  std::filesystem::remove(o.out);
  const auto msg = error_of(o);
  CHECK_MESSAGE(
      msg.find("fno2d_even_state.pt does not match " + o.model_config) != std::string::npos, msg);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(o.out));
}
