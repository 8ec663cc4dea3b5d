// HDF5 data files: write_hdf5/load_hdf5 round trips, subsampling by strided
// hyperslab, numeric dtypes, MATLAB v7.3 layout, one-line errors naming the
// file (with nothing printed by HDF5 itself), atomic writes, attributes.
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>

#include <doctest/doctest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "golden.h"

using fno::data::Attribute;
using fno::data::FieldPairs;
using fno::data::load_hdf5;
using fno::data::LoadOptions;
using fno::data::write_hdf5;
using fno::test::out_path;
using torch::indexing::None;
using torch::indexing::Slice;

namespace {

using fno::test::read_bytes;
using fno::test::write_bytes;

/// Owns a handle made by the raw C API in these tests.
struct H5Id {
  hid_t id;
  herr_t (*closer)(hid_t);
  H5Id(hid_t i, herr_t (*c)(hid_t)) : id(i), closer(c) { REQUIRE(id >= 0); }
  ~H5Id() { closer(id); }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  operator hid_t() const { return id; }
};

/// Redirects file descriptor 2 (std::cerr, HDF5's error printing) to a file.
class CaptureStderr {
 public:
  // One file per process: CTest runs test cases as parallel processes.
  CaptureStderr() : file_(out_path("hdf5_stderr." + std::to_string(::getpid()) + ".txt")) {
    std::cerr.flush();
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CaptureStderr() { restore(); }
  std::string finish() {
    restore();
    return read_bytes(file_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::cerr.flush();
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string file_;
  int saved_ = -1;
};

/// HDF5 objects (files, datasets, groups, types, attributes) still open anywhere.
ssize_t open_hdf5_objects() { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); }

/// load_hdf5 must throw one line that starts with the path and contains `expected`,
/// print nothing, and leave no HDF5 object open.
void check_one_line_error(const std::string& path, const std::string& expected, const LoadOptions& options = {}) {
  CaptureStderr capture;
  fno::test::check_one_line_error([&] { load_hdf5(path, options); }, path + ": ", expected);
  const std::string printed = capture.finish();
  CHECK_MESSAGE(printed.empty(), "printed to stderr: ", printed);
  CHECK(open_hdf5_objects() == 0);
}

/// t[:, ::k, ::k] or t[:, ::k, ::k, ::k]
torch::Tensor every(const torch::Tensor& t, int64_t k) {
  torch::Tensor out = t;
  for (int64_t d = 1; d < t.dim(); ++d) out = out.index_select(d, torch::arange(0, t.size(d), k));
  return out;
}

void check_pairs(const FieldPairs& got, const torch::Tensor& x, const torch::Tensor& y) {
  REQUIRE(got.x.defined());
  REQUIRE(got.y.defined());
  CHECK((got.x.scalar_type() == torch::kFloat));
  CHECK((got.y.scalar_type() == torch::kFloat));
  CHECK(got.x.is_contiguous());
  CHECK(got.y.is_contiguous());
  CHECK(got.x.device().is_cpu());
  const auto want_x = x.to(torch::kFloat).unsqueeze(1);
  const auto want_y = y.to(torch::kFloat).unsqueeze(1);
  REQUIRE_MESSAGE(got.x.sizes() == want_x.sizes(), got.x.sizes(), " vs ", want_x.sizes());
  REQUIRE_MESSAGE(got.y.sizes() == want_y.sizes(), got.y.sizes(), " vs ", want_y.sizes());
  CHECK(torch::equal(got.x, want_x));
  CHECK(torch::equal(got.y, want_y));
}

/// A dataset written with the raw C API from a contiguous CPU tensor.
void raw_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type, const torch::Tensor& t) {
  const std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Id ds(H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  REQUIRE(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) >= 0);
}

/// A MATLAB v7.3 file as MATLAB writes it: a 512-byte user block starting with
/// the MAT-file header, and every N x R1 x R2 (x R3) array stored column-major,
/// i.e. as HDF5 dims (R2, R1, N) (or (R3, R2, R1, N)).
void write_matlab_file(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& arrays,
                       bool with_header = true) {
  {
    H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    REQUIRE(H5Pset_userblock(fcpl, 512) >= 0);
    H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT), H5Fclose);
    for (const auto& [name, array] : arrays) {
      std::vector<int64_t> reversed;
      for (int64_t d = array.dim() - 1; d >= 0; --d) reversed.push_back(d);
      const auto column_major = array.to(torch::kDouble).permute(reversed).contiguous();
      raw_dataset(file, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, column_major);
    }
  }
  if (!with_header) return;
  // The user block is reserved bytes at the start of the file: fill in the header.
  std::string header = "MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 .";
  header.resize(116, ' ');
  header += std::string(8, '\0');  // subsystem data offset
  header += std::string("\x00\x02", 2);
  header += "IM";
  REQUIRE(header.size() == 128);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  REQUIRE(f != nullptr);
  CHECK(std::fwrite(header.data(), 1, header.size(), f) == header.size());
  std::fclose(f);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = out_path(name);
  ::mkdir(dir.c_str(), 0755);
  for (const auto& entry : list_dir(dir)) ::unlink((dir + "/" + entry).c_str());
  return dir;
}

}  // namespace

TEST_CASE("hdf5: write_hdf5 then load_hdf5 round-trips coeff/sol, with n_samples and subsample") {
  torch::manual_seed(11);
  const auto coeff = torch::randn({5, 12, 12});
  const auto sol = torch::randn({5, 12, 12});
  const auto path = out_path("darcy_roundtrip.h5");
  write_hdf5(path, {{"coeff", coeff}, {"sol", sol}});

  SUBCASE("everything") { check_pairs(load_hdf5(path), coeff, sol); }
  SUBCASE("subsample 2") { check_pairs(load_hdf5(path, LoadOptions().subsample(2)), every(coeff, 2), every(sol, 2)); }
  SUBCASE("subsample 3") { check_pairs(load_hdf5(path, LoadOptions().subsample(3)), every(coeff, 3), every(sol, 3)); }
  SUBCASE("subsample 5 (12 is not a multiple: points 0, 5, 10)") {
    const auto got = load_hdf5(path, LoadOptions().subsample(5));
    CHECK(got.x.sizes() == torch::IntArrayRef({5, 1, 3, 3}));
    check_pairs(got, every(coeff, 5), every(sol, 5));
  }
  SUBCASE("n_samples 3") {
    check_pairs(load_hdf5(path, LoadOptions().n_samples(3)), coeff.slice(0, 0, 3), sol.slice(0, 0, 3));
  }
  SUBCASE("n_samples 3 and subsample 2") {
    check_pairs(load_hdf5(path, LoadOptions().n_samples(3).subsample(2)), every(coeff.slice(0, 0, 3), 2),
                every(sol.slice(0, 0, 3), 2));
  }
  SUBCASE("n_samples 99 keeps all 5, with one warning line") {
    CaptureStderr capture;
    const auto got = load_hdf5(path, LoadOptions().n_samples(99));
    const std::string printed = capture.finish();
    check_pairs(got, coeff, sol);
    CHECK(printed == path + ": asked for 99 samples, file holds 5; using 5\n");
  }
  CHECK(open_hdf5_objects() == 0);
}

TEST_CASE(
    "hdf5: channel layouts read (N, C, *S) and (N, *S, C) as C channels, subsampling the grid "
    "alone") {
  using fno::data::Layout;
  torch::manual_seed(21);
  const auto coeff = torch::randn({5, 3, 12, 10});  // channels first: 3 fields per sample
  const auto sol = torch::randn({5, 12, 10, 2});    // channels last: e.g. 2 records in time
  const auto path = out_path("darcy_channels.h5");
  write_hdf5(path, {{"coeff", coeff}, {"sol", sol}});
  const auto layouts =
      LoadOptions().x_layout(Layout::kChannelsFirst).y_layout(Layout::kChannelsLast);
  const auto sol_first = sol.permute({0, 3, 1, 2});
  auto got = load_hdf5(path, layouts);
  CHECK((got.x.sizes() == torch::IntArrayRef{5, 3, 12, 10}));
  CHECK((got.y.sizes() == torch::IntArrayRef{5, 2, 12, 10}));
  CHECK(got.y.is_contiguous());
  CHECK(torch::equal(got.x, coeff));
  CHECK(torch::equal(got.y, sol_first));
  // n_samples and subsample: every 3rd point of the grid, every channel.
  const auto grid3 = [](const torch::Tensor& t) {
    return t.slice(0, 0, 2).slice(2, 0, t.size(2), 3).slice(3, 0, t.size(3), 3);
  };
  got = load_hdf5(path, LoadOptions(layouts).n_samples(2).subsample(3));
  CHECK((got.x.sizes() == torch::IntArrayRef{2, 3, 4, 4}));
  CHECK(torch::equal(got.x, grid3(coeff)));
  CHECK(torch::equal(got.y, grid3(sol_first)));
  // MATLAB v7.3 (dims reversed in the file): the same arrays.
  const auto mat = out_path("darcy_channels.mat");
  write_matlab_file(mat, {{"coeff", coeff}, {"sol", sol}});
  got = load_hdf5(mat, LoadOptions(layouts).n_samples(2).subsample(3));
  CHECK(torch::equal(got.x, grid3(coeff)));
  CHECK(torch::equal(got.y, grid3(sol_first)));
  // Read as grids, the arrays disagree; the wrong layout for a 2D grid is named.
  check_one_line_error(path,
                       "dataset 'coeff' has shape (5, 3, 12, 10) but 'sol' has (5, 12, 10, 2)");
  const auto flat = out_path("darcy_channels_flat.h5");
  write_hdf5(flat, {{"coeff", torch::randn({2, 6, 6})}, {"sol", torch::randn({2, 6, 6})}});
  check_one_line_error(
      flat, "dataset 'coeff' has rank 3, expected 4 (N, C, R1, R2) or 5 (N, C, R1, R2, R3)",
      LoadOptions().x_layout(Layout::kChannelsFirst));
  // A missing array names the setting that names it.
  check_one_line_error(path, "no dataset 'input' (found: coeff, sol); set data.x_key to its name",
                       LoadOptions().x_key("input").x_key_setting("data.x_key"));
}

TEST_CASE("hdf5: custom keys, with '/' making groups") {
  torch::manual_seed(12);
  const auto a = torch::rand({3, 8, 6});
  const auto b = torch::rand({3, 8, 6});
  const auto path = out_path("darcy_groups.h5");
  write_hdf5(path, {{"train/input", a}, {"train/output", b}});
  check_pairs(load_hdf5(path, LoadOptions().x_key("train/input").y_key("train/output")), a, b);
  check_pairs(load_hdf5(path, LoadOptions().x_key("/train/input").y_key("train/output").subsample(2)), every(a, 2),
              every(b, 2));
  check_one_line_error(path, "no dataset 'train/nothing' (found in 'train': input, output)",
                       LoadOptions().x_key("train/nothing").y_key("train/output"));
  check_one_line_error(path, "'train' is a group, not a dataset", LoadOptions().x_key("train").y_key("train/output"));
}

TEST_CASE("hdf5: integer, uint8, bool, float64 and enum datasets load as float32") {
  torch::manual_seed(13);
  const auto ints = torch::randint(-1000, 1000, {4, 6, 6}, torch::kInt);
  const auto longs = torch::randint(-(int64_t{1} << 20), int64_t{1} << 20, {4, 6, 6}, torch::kLong);
  const auto bytes = torch::randint(0, 256, {4, 6, 6}, torch::kByte);
  const auto bools = torch::rand({4, 6, 6}) > 0.5;
  const auto doubles = torch::randn({4, 6, 6}, torch::kDouble);

  SUBCASE("int32 and float64") {
    const auto path = out_path("darcy_int32_f64.h5");
    write_hdf5(path, {{"coeff", ints}, {"sol", doubles}});
    check_pairs(load_hdf5(path), ints, doubles);
    check_pairs(load_hdf5(path, LoadOptions().subsample(2)), every(ints, 2), every(doubles, 2));
  }
  SUBCASE("int64 and uint8") {
    const auto path = out_path("darcy_int64_u8.h5");
    write_hdf5(path, {{"coeff", longs}, {"sol", bytes}});
    check_pairs(load_hdf5(path), longs, bytes);
  }
  SUBCASE("bool is stored as uint8, chunked and compressed") {
    const auto path = out_path("darcy_bool.h5");
    write_hdf5(path, {{"coeff", bools}, {"sol", doubles}});
    check_pairs(load_hdf5(path), bools, doubles);
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    H5Id ds(H5Dopen2(file, "coeff", H5P_DEFAULT), H5Dclose);
    H5Id type(H5Dget_type(ds), H5Tclose);
    CHECK(H5Tequal(type, H5T_STD_U8LE) > 0);
    H5Id sol(H5Dopen2(file, "sol", H5P_DEFAULT), H5Dclose);
    H5Id sol_type(H5Dget_type(sol), H5Tclose);
    CHECK(H5Tequal(sol_type, H5T_IEEE_F64LE) > 0);  // float64 stays float64 in the file
    H5Id dcpl(H5Dget_create_plist(sol), H5Pclose);
    CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED);
    CHECK(H5Pget_nfilters(dcpl) == 2);
    unsigned flags = 0;
    size_t n_values = 1;
    unsigned level = 0;
    CHECK(H5Pget_filter_by_id2(dcpl, H5Z_FILTER_SHUFFLE, &flags, nullptr, nullptr, 0, nullptr, nullptr) >= 0);
    CHECK(H5Pget_filter_by_id2(dcpl, H5Z_FILTER_DEFLATE, &flags, &n_values, &level, 0, nullptr, nullptr) >= 0);
    CHECK(level == 4);
  }
  SUBCASE("h5py's bool: an enum {FALSE, TRUE} over int8") {
    const auto path = out_path("darcy_enum_bool.h5");
    {
      H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      H5Id bool_type(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
      int8_t v = 0;
      REQUIRE(H5Tenum_insert(bool_type, "FALSE", &v) >= 0);
      v = 1;
      REQUIRE(H5Tenum_insert(bool_type, "TRUE", &v) >= 0);
      const auto as_int8 = bools.to(torch::kChar).contiguous();
      raw_dataset(file, "coeff", bool_type, bool_type, as_int8);
      raw_dataset(file, "sol", H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE, doubles);
    }
    check_pairs(load_hdf5(path), bools, doubles.to(torch::kFloat));
    check_pairs(load_hdf5(path, LoadOptions().subsample(3).n_samples(2)), every(bools.slice(0, 0, 2), 3),
                every(doubles.slice(0, 0, 2).to(torch::kFloat), 3));
  }
  SUBCASE("big-endian int16 (HDF5 converts)") {
    const auto path = out_path("darcy_i16be.h5");
    const auto shorts = torch::randint(-30000, 30000, {4, 6, 6}, torch::kShort);
    {
      H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      raw_dataset(file, "coeff", H5T_STD_I16BE, H5T_NATIVE_SHORT, shorts);
      raw_dataset(file, "sol", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, doubles);
    }
    check_pairs(load_hdf5(path), shorts, doubles);
  }
  CHECK(open_hdf5_objects() == 0);
}

TEST_CASE("hdf5: MATLAB v7.3 files (user block, column-major dims) load transposed back") {
  torch::manual_seed(14);
  // R1 != R2, so a wrong permutation changes the shape.
  const auto coeff = torch::randn({4, 6, 10}, torch::kDouble);
  const auto sol = torch::randn({4, 6, 10}, torch::kDouble);
  const auto path = out_path("darcy_matlab.mat");
  write_matlab_file(path, {{"coeff", coeff}, {"sol", sol}});
  {
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    H5Id ds(H5Dopen2(file, "coeff", H5P_DEFAULT), H5Dclose);
    H5Id space(H5Dget_space(ds), H5Sclose);
    hsize_t dims[3] = {0, 0, 0};
    REQUIRE(H5Sget_simple_extent_dims(space, dims, nullptr) == 3);
    CHECK(dims[0] == 10);  // as MATLAB stores it: (R2, R1, N)
    CHECK(dims[1] == 6);
    CHECK(dims[2] == 4);
    CHECK(read_bytes(path).rfind("MATLAB 7.3 MAT-file", 0) == 0);
  }
  check_pairs(load_hdf5(path), coeff, sol);
  check_pairs(load_hdf5(path, LoadOptions().subsample(3)), every(coeff, 3), every(sol, 3));
  check_pairs(load_hdf5(path, LoadOptions().n_samples(2).subsample(2)), every(coeff.slice(0, 0, 2), 2),
              every(sol.slice(0, 0, 2), 2));

  // The hyperslab reader reads the same samples and rows (MATLAB's order undone).
  {
    const fno::data::Hdf5SlabReader slab(path, "coeff");
    CHECK(slab.shape() == std::vector<int64_t>{4, 1, 6, 10});
    CHECK(torch::equal(slab.read(1, 3, 2, 5), load_hdf5(path).x.narrow(0, 1, 2).narrow(2, 2, 3)));
  }

  // The shape message uses MATLAB's order, (N, R1, R2).
  const auto bad = out_path("darcy_matlab_mismatch.mat");
  write_matlab_file(bad, {{"coeff", coeff}, {"sol", torch::zeros({4, 6, 9})}});
  check_one_line_error(bad, "dataset 'coeff' has shape (4, 6, 10) but 'sol' has (4, 6, 9)");

  // A user block without the MATLAB header: an ordinary (N, R1, R2) file.
  const auto plain = out_path("darcy_userblock.h5");
  write_matlab_file(plain, {{"coeff", coeff}, {"sol", sol}}, /*with_header=*/false);
  const auto got = load_hdf5(plain);
  CHECK(got.x.sizes() == torch::IntArrayRef({10, 1, 6, 4}));
  CHECK(torch::equal(got.x.squeeze(1), coeff.permute({2, 1, 0}).to(torch::kFloat)));
}

TEST_CASE("hdf5: 3D grids (N, R1, R2, R3) round-trip, with n_samples and subsample on every dim") {
  torch::manual_seed(17);
  // Unequal sides, so that a dim mixed up changes the shape.
  const auto coeff = torch::randn({5, 6, 8, 10});
  const auto sol = torch::randn({5, 6, 8, 10}, torch::kDouble);
  const auto path = out_path("poisson3d_roundtrip.h5");
  write_hdf5(path, {{"coeff", coeff}, {"sol", sol}});

  check_pairs(load_hdf5(path), coeff, sol);
  {
    const auto got = load_hdf5(path, LoadOptions().subsample(2));
    CHECK(got.x.sizes() == torch::IntArrayRef({5, 1, 3, 4, 5}));
    check_pairs(got, every(coeff, 2), every(sol, 2));
  }
  {
    const auto got = load_hdf5(path, LoadOptions().subsample(3).n_samples(2));
    // Points 0, 3 / 0, 3, 6 / 0, 3, 6, 9.
    CHECK(got.x.sizes() == torch::IntArrayRef({2, 1, 2, 3, 4}));
    check_pairs(got, every(coeff.slice(0, 0, 2), 3), every(sol.slice(0, 0, 2), 3));
  }
  // The generic loader (format detection) takes the same path.
  const auto via_darcy = fno::data::load_darcy(path, LoadOptions().subsample(2));
  check_pairs(via_darcy, every(coeff, 2), every(sol, 2));

  // The normalizer and the predictions' [k, 1, R1, R2, R3] datasets work at rank 5.
  fno::data::UnitGaussianNormalizer norm;
  norm.fit(via_darcy.y);
  CHECK(norm.mean().sizes() == torch::IntArrayRef({1, 1, 1, 1, 1}));
  CHECK(torch::allclose(norm.inverse_transform(norm.transform(via_darcy.y)), via_darcy.y, 1e-5,
                        1e-6));
  const auto pred_path = out_path("poisson3d_predictions.h5");
  write_hdf5(pred_path,
             {{"16/x", via_darcy.x.narrow(0, 0, 2)}, {"16/pred", via_darcy.y.narrow(0, 0, 2)}});
  {
    H5Id file(H5Fopen(pred_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    H5Id ds(H5Dopen2(file, "16/pred", H5P_DEFAULT), H5Dclose);
    H5Id space(H5Dget_space(ds), H5Sclose);
    hsize_t dims[5] = {0, 0, 0, 0, 0};
    REQUIRE(H5Sget_simple_extent_dims(space, dims, nullptr) == 5);
    CHECK(std::vector<hsize_t>(dims, dims + 5) == std::vector<hsize_t>{2, 1, 3, 4, 5});
  }
  CHECK(open_hdf5_objects() == 0);
}

TEST_CASE("hdf5: 3D MATLAB v7.3 arrays, stored (R3, R2, R1, N), load as (N, R1, R2, R3)") {
  torch::manual_seed(18);
  const auto coeff = torch::randn({3, 4, 6, 7}, torch::kDouble);
  const auto sol = torch::randn({3, 4, 6, 7}, torch::kDouble);
  const auto path = out_path("poisson3d_matlab.mat");
  write_matlab_file(path, {{"coeff", coeff}, {"sol", sol}});
  {
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    H5Id ds(H5Dopen2(file, "coeff", H5P_DEFAULT), H5Dclose);
    H5Id space(H5Dget_space(ds), H5Sclose);
    hsize_t dims[4] = {0, 0, 0, 0};
    REQUIRE(H5Sget_simple_extent_dims(space, dims, nullptr) == 4);
    CHECK(std::vector<hsize_t>(dims, dims + 4) == std::vector<hsize_t>{7, 6, 4, 3});
  }
  check_pairs(load_hdf5(path), coeff, sol);
  check_pairs(load_hdf5(path, LoadOptions().subsample(2).n_samples(2)),
              every(coeff.slice(0, 0, 2), 2), every(sol.slice(0, 0, 2), 2));

  const auto bad = out_path("poisson3d_matlab_rank5.mat");
  write_matlab_file(
      bad, {{"coeff", torch::zeros({2, 3, 3, 3, 3})}, {"sol", torch::zeros({2, 3, 3, 3})}});
  check_one_line_error(
      bad,
      "dataset 'coeff' has rank 5, expected 3 (N, R1, R2) or 4 (N, R1, R2, R3) (MATLAB "
      "stores them reversed: (R2, R1, N) or (R3, R2, R1, N))");
}

TEST_CASE("hdf5: bad files give one-line errors naming the file") {
  torch::manual_seed(15);
  const auto good = out_path("darcy_good.h5");
  write_hdf5(good, {{"coeff", torch::randn({5, 32, 32})}, {"sol", torch::randn({5, 32, 32})}});

  check_one_line_error(out_path("does_not_exist.h5"), "no such file");

  const auto empty = out_path("darcy_empty.h5");
  write_bytes(empty, "");
  check_one_line_error(empty, "empty file");

  const auto garbage = out_path("darcy_garbage.h5");
  write_bytes(garbage, std::string(4096, '\x5a') + "not an HDF5 file at all");
  check_one_line_error(garbage, "not an HDF5 file");

  const auto truncated = out_path("darcy_truncated.h5");
  const std::string whole = read_bytes(good);
  REQUIRE(whole.size() > 8192);
  write_bytes(truncated, whole.substr(0, whole.size() / 2));
  check_one_line_error(truncated, "truncated");

  check_one_line_error(good, "no dataset 'a' (found: coeff, sol)", LoadOptions().x_key("a"));
  check_one_line_error(good, "no dataset 'b' (found: coeff, sol)", LoadOptions().y_key("b"));

  const auto rank2 = out_path("darcy_rank2.h5");
  write_hdf5(rank2, {{"coeff", torch::zeros({4, 8, 8})}, {"sol", torch::zeros({8, 8})}});
  check_one_line_error(rank2,
                       "dataset 'sol' has rank 2, expected 3 (N, R1, R2) or 4 (N, R1, R2, R3)");

  const auto rank5 = out_path("darcy_rank5.h5");
  write_hdf5(rank5,
             {{"coeff", torch::zeros({2, 4, 4, 4, 4})}, {"sol", torch::zeros({2, 4, 4, 4})}});
  check_one_line_error(rank5,
                       "dataset 'coeff' has rank 5, expected 3 (N, R1, R2) or 4 (N, R1, R2, R3)");

  const auto mixed = out_path("darcy_mixed_rank.h5");
  write_hdf5(mixed, {{"coeff", torch::zeros({2, 4, 4})}, {"sol", torch::zeros({2, 4, 4, 4})}});
  check_one_line_error(mixed, "dataset 'coeff' has shape (2, 4, 4) but 'sol' has (2, 4, 4, 4)");

  const auto empty_3d = out_path("darcy_empty_3d.h5");
  write_hdf5(empty_3d,
             {{"coeff", torch::zeros({2, 4, 0, 4})}, {"sol", torch::zeros({2, 4, 0, 4})}});
  check_one_line_error(empty_3d, "dataset 'coeff' has an empty grid (2, 4, 0, 4)");

  const auto mismatch = out_path("darcy_mismatch.h5");
  write_hdf5(mismatch, {{"coeff", torch::zeros({10, 8, 8})}, {"sol", torch::zeros({10, 8, 9})}});
  check_one_line_error(mismatch, "dataset 'coeff' has shape (10, 8, 8) but 'sol' has (10, 8, 9)");

  const auto strings = out_path("darcy_strings.h5");
  {
    H5Id file(H5Fcreate(strings.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
    REQUIRE(H5Tset_size(type, H5T_VARIABLE) >= 0);
    const hsize_t dims[3] = {1, 2, 2};
    H5Id space(H5Screate_simple(3, dims, nullptr), H5Sclose);
    H5Id ds(H5Dcreate2(file, "coeff", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    const char* text[4] = {"a", "b", "c", "d"};
    REQUIRE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) >= 0);
    raw_dataset(file, "sol", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, torch::zeros({1, 2, 2}));
  }
  check_one_line_error(strings, "dataset 'coeff' is not numeric (string)");

  const auto zero = out_path("darcy_zero.h5");
  write_hdf5(zero, {{"coeff", torch::zeros({0, 8, 8})}, {"sol", torch::zeros({0, 8, 8})}});
  check_one_line_error(zero, "holds 0 samples");

  const auto nan = out_path("darcy_nan.h5");
  auto sol = torch::zeros({3, 8, 8});
  sol[2][4][5] = std::numeric_limits<float>::quiet_NaN();
  write_hdf5(nan, {{"coeff", torch::zeros({3, 8, 8})}, {"sol", sol}});
  check_one_line_error(nan, "NaN or Inf in 'sol'");
  check_pairs(load_hdf5(nan, LoadOptions().n_samples(2)), torch::zeros({2, 8, 8}), torch::zeros({2, 8, 8}));

  check_one_line_error(good, "subsample must be >= 1", LoadOptions().subsample(0));
  check_one_line_error(good, "n_samples must be positive or -1", LoadOptions().n_samples(0));
  check_one_line_error(out_path(""), "is a directory");
}

TEST_CASE("hdf5: write_hdf5 is atomic and names the path in errors") {
  const auto dir = fresh_dir("hdf5_atomic");
  const auto path = dir + "/data.h5";
  write_hdf5(path, {{"coeff", torch::ones({2, 4, 4})}, {"sol", torch::ones({2, 4, 4})}});
  CHECK(list_dir(dir) == std::vector<std::string>{"data.h5"});
  // Replacing an existing file.
  write_hdf5(path, {{"coeff", torch::full({3, 4, 4}, 2.0)}, {"sol", torch::full({3, 4, 4}, 3.0)}});
  CHECK(list_dir(dir) == std::vector<std::string>{"data.h5"});
  check_pairs(load_hdf5(path), torch::full({3, 4, 4}, 2.0), torch::full({3, 4, 4}, 3.0));

  auto check_write_error = [&](const std::string& target, const std::vector<std::pair<std::string, torch::Tensor>>& ds,
                               const std::string& expected) {
    INFO("target ", target);
    try {
      write_hdf5(target, ds);
      FAIL("no error");
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      INFO("message: ", msg);
      CHECK(msg.rfind(target + ": ", 0) == 0);
      CHECK(msg.find('\n') == std::string::npos);
      CHECK(msg.find(expected) != std::string::npos);
    }
    CHECK(open_hdf5_objects() == 0);
  };
  const auto missing_dir = out_path("no_such_dir/sub/data.h5");
  check_write_error(missing_dir, {{"coeff", torch::ones({2, 4, 4})}}, "cannot create a temporary file");
  // Errors found by HDF5 (a duplicate name) and by us (a dtype) leave no temporary file.
  check_write_error(path, {{"coeff", torch::ones({2, 4, 4})}, {"coeff", torch::ones({2, 4, 4})}},
                    "cannot create dataset 'coeff'");
  check_write_error(path, {{"z", torch::ones({2, 2}, torch::kComplexFloat)}}, "dtype");
  check_write_error(path, {{"s", torch::tensor(1.0)}}, "rank 0");
  CHECK(list_dir(dir) == std::vector<std::string>{"data.h5"});
  // The failed writes left the old file in place.
  check_pairs(load_hdf5(path), torch::full({3, 4, 4}, 2.0), torch::full({3, 4, 4}, 3.0));
}

TEST_CASE("hdf5: large samples are chunked under ~1 MiB and read back") {
  torch::manual_seed(16);
  const auto big = torch::randn({2, 600, 700});  // 1.6 MiB per sample
  const auto path = out_path("darcy_big.h5");
  write_hdf5(path, {{"coeff", big}, {"sol", big * 2}, {"vector", torch::arange(300000, torch::kLong)}});
  {
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    for (const auto& entry : {std::pair<const char*, hsize_t>{"coeff", 4}, {"vector", 8}}) {
      // (no structured binding: clang 14 cannot capture one in doctest's INFO lambda)
      const char* name = entry.first;
      const hsize_t element_size = entry.second;
      INFO("dataset ", std::string(name));
      H5Id ds(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
      H5Id dcpl(H5Dget_create_plist(ds), H5Pclose);
      hsize_t chunk[3] = {0, 0, 0};
      const int rank = H5Pget_chunk(dcpl, 3, chunk);
      REQUIRE(rank >= 1);
      hsize_t elements = 1;
      for (int i = 0; i < rank; ++i) elements *= chunk[i];
      CHECK(elements * element_size <= (hsize_t{1} << 20));  // at most 1 MiB
      CHECK(elements * element_size >= (hsize_t{1} << 19));  // and not tiny
    }
  }
  check_pairs(load_hdf5(path, LoadOptions().subsample(7)), every(big, 7), every(big * 2, 7));
}

TEST_CASE("hdf5: root attributes round-trip (UTF-8 strings, float64)") {
  const auto path = out_path("darcy_attrs.h5");
  Attribute text;
  text.name = "description";
  text.text = "Darcy flow, \xce\xbd = 1e-3 \xe2\x80\x93 r421";  // UTF-8
  Attribute number;
  number.name = "resolution";
  number.number = 421.5;
  number.is_number = true;
  write_hdf5(path, {{"coeff", torch::zeros({1, 2, 2})}}, {text, number});

  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  {
    H5Id attr(H5Aopen(file, "description", H5P_DEFAULT), H5Aclose);
    H5Id type(H5Aget_type(attr), H5Tclose);
    CHECK(H5Tget_class(type) == H5T_STRING);
    CHECK(H5Tget_cset(type) == H5T_CSET_UTF8);
    REQUIRE(H5Tis_variable_str(type) > 0);
    H5Id mem_type(H5Tcopy(H5T_C_S1), H5Tclose);
    REQUIRE(H5Tset_size(mem_type, H5T_VARIABLE) >= 0);
    REQUIRE(H5Tset_cset(mem_type, H5T_CSET_UTF8) >= 0);
    char* value = nullptr;
    REQUIRE(H5Aread(attr, mem_type, &value) >= 0);
    REQUIRE(value != nullptr);
    CHECK(std::string(value) == text.text);
    H5free_memory(value);
  }
  {
    H5Id attr(H5Aopen(file, "resolution", H5P_DEFAULT), H5Aclose);
    H5Id type(H5Aget_type(attr), H5Tclose);
    CHECK(H5Tequal(type, H5T_IEEE_F64LE) > 0);
    double value = 0;
    REQUIRE(H5Aread(attr, H5T_NATIVE_DOUBLE, &value) >= 0);
    CHECK(value == 421.5);
  }
  CHECK(H5Aexists(file, "other") == 0);
}

TEST_CASE("an HDF5 file that crashes libhdf5 gives a one-line error, not a crash") {
  // Debian's libhdf5 1.10.8 dereferences NULL on this damaged local heap
  // (tests/fuzz/seeds/hdf5/regression-libhdf5-segv.h5); the read runs in a child
  // process first, so whatever the library does, the caller sees an error.
  const std::string path = std::string(FNO_SOURCE_DIR) + "/tests/fuzz/seeds/hdf5/regression-libhdf5-segv.h5";
  try {
    fno::data::load_hdf5(path, fno::data::LoadOptions());
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.rfind(path + ": ", 0) == 0);
    CHECK(what.find('\n') == std::string::npos);
    MESSAGE(what);
  }
}
