// torch.save files without Python: neuraloperator's state dicts load, garbage
// gets a one-line error naming the file, writes are atomic.
#include <fno/serialize.h>
#include <fno/torch_file.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "golden.h"

using fno::test::golden_path;
using fno::test::out_path;

using fno::test::read_bytes;
using fno::test::write_bytes;

namespace {

void check_one_line_error(const std::string& path, const std::string& expected) {
  fno::test::check_one_line_error([&] { fno::load_tensor_dict(path); }, path, expected);
}

}  // namespace

TEST_CASE("neuraloperator's state dict (OrderedDict with _metadata) loads without Python") {
  // LibTorch's torch::pickle_load turns the OrderedDict into None and rejects
  // the Python functions in "_metadata"; our reader keeps the tensors.
  const auto sd = fno::load_tensor_dict(golden_path("seed_state.pt"));
  CHECK(sd.size() == 40);
  const auto* w = sd.find("fno_blocks.convs.0.weight.tensor");
  REQUIRE(w != nullptr);
  CHECK((w->scalar_type() == torch::kComplexFloat));
  CHECK((w->sizes() == torch::IntArrayRef({32, 32, 16, 9})));
  CHECK(sd.find("_metadata") == nullptr);
}

TEST_CASE("read_torch_file keeps non-contiguous strides and shared storages") {
  // A dict saved by LibTorch's pickle_save reads back identically.
  auto base = torch::arange(24, torch::kFloat).view({2, 3, 4});
  fno::TensorDict d;
  d.insert("t", base.permute({2, 0, 1}).contiguous());
  d.insert("b", torch::tensor({true, false, true}));
  d.insert("c", torch::randn({3}, torch::kComplexDouble));
  const auto path = out_path("strided.pt");
  fno::save_tensor_dict(d, path);
  const auto back = fno::load_tensor_dict(path);
  CHECK(torch::equal(back["t"], d["t"]));
  CHECK(torch::equal(back["b"], d["b"]));
  CHECK(torch::equal(back["c"], d["c"]));
}

TEST_CASE("bad torch.save files give one-line errors naming the file") {
  const auto missing = out_path("does_not_exist.pt");
  check_one_line_error(missing, "no such file");

  const auto empty = out_path("empty.pt");
  write_bytes(empty, "");
  check_one_line_error(empty, "empty file");

  const auto garbage = out_path("garbage.pt");
  write_bytes(garbage, std::string(4096, '\x5a') + "not a zip file at all");
  check_one_line_error(garbage, "torch.save");

  const auto good = read_bytes(golden_path("fno1d_even_state.pt"));
  const auto truncated = out_path("truncated.pt");
  write_bytes(truncated, good.substr(0, good.size() / 2));
  check_one_line_error(truncated, "");

  const auto dir = out_path("a_directory.pt");
  std::filesystem::create_directories(dir);
  check_one_line_error(dir, "not a regular file");

  // A valid file that is not a dict of tensors.
  const auto list_file = out_path("not_a_dict.pt");
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(torch::zeros({2}));
  const auto bytes = torch::pickle_save(list);
  fno::write_file_atomic(list_file, bytes.data(), bytes.size());
  check_one_line_error(list_file, "expected a dict of tensors");
}

TEST_CASE("write_file_atomic replaces the target and leaves no temporary files") {
  const auto dir = out_path("atomic");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir + "/ckpt.pt";
  fno::write_file_atomic(path, "first", 5);
  fno::write_file_atomic(path, "second", 6);
  CHECK(read_bytes(path) == "second");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  CHECK_THROWS_WITH_AS(fno::write_file_atomic(dir + "/no/such/dir/x.pt", "x", 1),
                       doctest::Contains("cannot create a temporary file"), std::runtime_error);
}
