// The Darcy coefficient field drawn alone (fno_datagen --inputs-only;
// fno_data/darcy_gen.h): GrfRows against grf_from_noise, with every mode and
// with the finer modes dropped; the inputs-only files against the solved
// run's coeff, byte for byte; their attributes, their chunks of rows, no
// filters, determinism, a stop within a sample, and the options refused.
#include <fno_data/darcy.h>
#include <fno_data/darcy_gen.h>

#include <doctest/doctest.h>
#include <hdf5.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "golden.h"

using fno::data::DarcyGenOptions;
using fno::data::generate_darcy;
using fno::test::out_path;
using fno::test::read_bytes;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = out_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

torch::Tensor read_coeff(const std::string& path) {
  return fno::data::load_hdf5(path, fno::data::LoadOptions().x_key("coeff").y_key("coeff"))
      .x.squeeze(1);
}

/// The dataset's chunk dims and number of filters.
struct Layout {
  std::vector<hsize_t> chunk;
  int filters = -1;
  bool has_sol = true;
};

Layout layout_of(const std::string& path) {
  Layout out;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t ds = H5Dopen2(file, "coeff", H5P_DEFAULT);
  REQUIRE(ds >= 0);
  const hid_t dcpl = H5Dget_create_plist(ds);
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    out.chunk.resize(3);
    H5Pget_chunk(dcpl, 3, out.chunk.data());
  }
  out.filters = H5Pget_nfilters(dcpl);
  out.has_sol = H5Lexists(file, "sol", H5P_DEFAULT) > 0;
  H5Pclose(dcpl);
  H5Dclose(ds);
  H5Fclose(file);
  return out;
}

std::string text_attr(const std::string& path, const std::string& name) {
  for (const auto& a : fno::data::read_hdf5_attributes(path)) {
    if (a.name == name) return a.is_number ? std::to_string(a.number) : a.text;
  }
  return "(none)";
}

}  // namespace

TEST_CASE(
    "GrfRows: every mode gives grf_from_noise's field, fewer the field less its finer modes") {
  const int64_t r = 33;
  const torch::Tensor xi = fno::data::grf_noise(5, 2, r);
  const torch::Tensor g = fno::data::grf_from_noise(xi.unsqueeze(0), 2.0, 3.0)[0];
  const double scale = g.abs().max().item<double>();
  const fno::data::GrfRows all(fno::data::grf_coefficients(5, 2, r, 2.0, 3.0), r, torch::kCPU);
  CHECK(all.modes() == r);
  const torch::Tensor rows = all.rows(0, r);
  REQUIRE(rows.sizes() == g.sizes());
  CHECK((rows - g).abs().max().item<double>() <= 1e-13 * scale);
  // A band, every 4th row and column (a subsampled grid).
  CHECK((all.rows(8, 5, 4) - g.slice(0, 8, 25, 4).slice(1, 0, r, 4)).abs().max().item<double>() <=
        1e-13 * scale);

  // K = 9: the first 9 shells of the same noise, the others zero.
  const int64_t k = 9;
  torch::Tensor cut = xi.clone();
  cut.slice(0, k).zero_();
  cut.slice(1, k).zero_();
  const torch::Tensor g9 = fno::data::grf_from_noise(cut.unsqueeze(0), 2.0, 3.0)[0];
  const fno::data::GrfRows some(fno::data::grf_coefficients(5, 2, k, 2.0, 3.0), r, torch::kCPU);
  CHECK(some.modes() == k);
  CHECK((some.rows(0, r) - g9).abs().max().item<double>() <= 1e-13 * scale);
  // The finer modes are a small part of the field (here about 12% of its norm).
  const double rel = ((g9 - g).norm() / g.norm()).item<double>();
  CHECK(rel > 0.01);
  CHECK(rel < 0.25);

  CHECK_THROWS_WITH(fno::data::GrfRows(torch::zeros({40, 40}, torch::kDouble), r, torch::kCPU),
                    doctest::Contains("40 modes per dim for a grid of 33 nodes"));
  CHECK_THROWS_WITH(all.rows(30, 2, 4), doctest::Contains("outside [0, 33)"));
}

TEST_CASE("datagen --inputs-only: the solved run's coeff, byte for byte, chunked by rows") {
  const std::string dir = fresh_dir("datagen_inputs");
  const auto base =
      DarcyGenOptions().resolution(65).samples(4).test_samples(1).subsample(2).seed(11).device(
          "cpu");
  const auto solved = generate_darcy(DarcyGenOptions(base).out(dir + "/s.h5"));
  std::vector<std::pair<int64_t, int64_t>> seen;
  fno::data::GenHooks hooks;
  hooks.progress = [&](int64_t done, int64_t total) { seen.emplace_back(done, total); };
  const auto inputs =
      generate_darcy(DarcyGenOptions(base).inputs_only(true).out(dir + "/i.h5"), hooks);
  REQUIRE(inputs.files == std::vector<std::string>{dir + "/i_train.h5", dir + "/i_test.h5"});
  REQUIRE(inputs.report.size() == 2);
  CHECK(inputs.report[0] == "grf_modes 65");
  CHECK(inputs.report[1].find("draw_seconds ") == 0);
  // Progress in rows of the stored grid (33 a sample), to the end.
  REQUIRE(!seen.empty());
  CHECK(seen.back() == std::pair<int64_t, int64_t>{4 * 33, 4 * 33});
  for (const char* split : {"train", "test"}) {
    const std::string s = dir + "/s_" + split + ".h5", i = dir + "/i_" + split + ".h5";
    INFO("split ", std::string(split));
    CHECK(torch::equal(read_coeff(s), read_coeff(i)));
    const Layout l = layout_of(i);
    CHECK(l.chunk == std::vector<hsize_t>{1, 33, 33});
    CHECK(l.filters == 0);
    CHECK(!l.has_sol);
    CHECK(text_attr(i, "solution").find("no solution u was computed") != std::string::npos);
    CHECK(text_attr(i, "inputs_only") == std::to_string(1.0));
    CHECK(text_attr(i, "grf_modes") == std::to_string(65.0));
    CHECK(text_attr(i, "split") == split);
    CHECK(text_attr(i, "stored_resolution") == std::to_string(33.0));
  }
  CHECK(solved.files.size() == 2);
}

TEST_CASE("datagen --inputs-only: chunks of rows on a larger grid, the same bytes twice") {
  const std::string dir = fresh_dir("datagen_inputs_large");
  // 1025 nodes a side: 4100 bytes a row, 255 rows in 1 MiB: 5 chunks of 205 rows.
  const auto o =
      DarcyGenOptions().resolution(1025).samples(1).seed(3).device("cpu").inputs_only(true);
  generate_darcy(DarcyGenOptions(o).grf_modes(64).out(dir + "/a.h5"));
  generate_darcy(DarcyGenOptions(o).grf_modes(64).out(dir + "/b.h5"));
  CHECK(layout_of(dir + "/a.h5").chunk == std::vector<hsize_t>{1, 205, 1025});
  const auto bytes = read_bytes(dir + "/a.h5");
  CHECK(bytes == read_bytes(dir + "/b.h5"));
  CHECK(bytes.size() < 1025 * 1025 * 4 + 100000);  // not compressed, little besides the data
  const torch::Tensor a = read_coeff(dir + "/a.h5");
  REQUIRE(a.sizes() == torch::IntArrayRef({1, 1025, 1025}));
  CHECK(((a == 3) | (a == 12)).all().item<bool>());
  const double high = (a == 12).to(torch::kDouble).mean().item<double>();
  CHECK(high > 0.2);
  CHECK(high < 0.8);
  // 64 modes of 1025: the same field as every mode's but for points near g = 0.
  generate_darcy(DarcyGenOptions(o).out(dir + "/all.h5"));
  CHECK(text_attr(dir + "/all.h5", "grf_modes") == std::to_string(1025.0));
  const double differ = (read_coeff(dir + "/all.h5") != a).to(torch::kDouble).mean().item<double>();
  CHECK(differ > 0);
  CHECK(differ < 0.05);
}

TEST_CASE("datagen --inputs-only: a stop within a sample leaves no file") {
  const std::string dir = fresh_dir("datagen_inputs_stop");
  fno::data::GenHooks hooks;
  int polls = 0;
  // Polled before the sample and before each band: SIGTERM before the second band.
  hooks.stop_requested = [&] { return ++polls >= 3 ? 15 : 0; };
  // 4097 nodes: 16 KiB a row, 66 chunks of 63 rows, bands of 1008: the first band, then the stop.
  const auto o = DarcyGenOptions()
                     .resolution(4097)
                     .samples(1)
                     .seed(1)
                     .device("cpu")
                     .inputs_only(true)
                     .grf_modes(16)
                     .out(dir + "/x.h5");
  CHECK_THROWS_AS(generate_darcy(o, hooks), fno::data::DatagenInterrupted);
  CHECK(polls == 3);
  CHECK(std::filesystem::is_empty(dir));
}

TEST_CASE("datagen --inputs-only: the options it refuses, in one line naming them") {
  const std::string dir = fresh_dir("datagen_inputs_options");
  const auto o =
      DarcyGenOptions().resolution(17).samples(2).seed(1).device("cpu").out(dir + "/x.h5");
  const auto refused = [](const DarcyGenOptions& options, const std::string& what) {
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(fno::data::validate_darcy_options(options),
                         doctest::Contains(what.c_str()), c10::ValueError);
  };
  refused(DarcyGenOptions(o).grf_modes(4), "grf_modes applies to inputs_only");
  refused(DarcyGenOptions(o).inputs_only(true).grf_modes(18),
          "grf_modes must be in [0, resolution] = [0, 17], got 18");
  refused(DarcyGenOptions(o).inputs_only(true).batch_size(2),
          "inputs_only makes one sample at a time, got 2");
  refused(DarcyGenOptions(o).resolution(16386), "resolution must be <= 16385, got 16386");
  refused(DarcyGenOptions(o).inputs_only(true).resolution(65538),
          "resolution must be <= 65537 with inputs_only, got 65538");
  fno::data::validate_darcy_options(DarcyGenOptions(o).inputs_only(true).resolution(65537));
  fno::data::GenHooks resume;
  resume.resume = true;
  CHECK_THROWS_WITH_AS(generate_darcy(DarcyGenOptions(o).inputs_only(true), resume),
                       doctest::Contains("inputs_only is not resumable"), c10::ValueError);
  CHECK(std::filesystem::is_empty(dir));
}

TEST_CASE("datagen --inputs-only on CUDA: the CPU's coefficient") {
  if (!torch::cuda::is_available()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  const std::string dir = fresh_dir("datagen_inputs_cuda");
  const auto o = DarcyGenOptions().resolution(257).samples(2).seed(6).inputs_only(true);
  generate_darcy(DarcyGenOptions(o).device("cpu").out(dir + "/cpu.h5"));
  generate_darcy(DarcyGenOptions(o).device("cuda").out(dir + "/cuda.h5"));
  // cuFFT rounds otherwise than the CPU's FFT: only a point where |g| is
  // about 1e-16 could take the other value.
  CHECK(torch::equal(read_coeff(dir + "/cpu.h5"), read_coeff(dir + "/cuda.h5")));
  CHECK(text_attr(dir + "/cuda.h5", "device") == "cuda");
}
