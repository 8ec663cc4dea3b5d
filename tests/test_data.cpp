// neuraloperator's .pt Darcy files, validation, normalization and batching.
#include <fno_data/darcy.h>

#include <fno/serialize.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fstream>

#include "golden.h"

using fno::test::out_path;

namespace {

std::string darcy(const std::string& name) { return std::string(FNO_SOURCE_DIR) + "/data/darcy/" + name; }

void check_error(const std::function<void()>& fn, const std::string& path, const std::string& expected) {
  fno::test::check_one_line_error(fn, path, expected);
}

}  // namespace

TEST_CASE("the shipped neuraloperator Darcy files load with their documented statistics") {
  const auto train = fno::data::load_darcy(darcy("darcy_train_16.pt"));
  CHECK((train.x.sizes() == torch::IntArrayRef{1000, 1, 16, 16}));
  CHECK((train.y.sizes() == torch::IntArrayRef{1000, 1, 16, 16}));
  CHECK(train.x.is_contiguous());
  CHECK((train.x.scalar_type() == torch::kFloat));
  // data/darcy/README.md: y mean 0.3863, std 0.3400; x mean 0.499, values 0/1.
  CHECK(train.y.mean().item<double>() == doctest::Approx(0.3863).epsilon(1e-3));
  CHECK(train.y.std().item<double>() == doctest::Approx(0.3400).epsilon(1e-3));
  CHECK(train.x.mean().item<double>() == doctest::Approx(0.499).epsilon(2e-3));
  CHECK(torch::logical_or(train.x == 0, train.x == 1).all().item<bool>());
}

TEST_CASE("non-contiguous storage and subsampling: test_32[:, ::2, ::2] equals test_16") {
  const auto t16 = fno::data::load_darcy(darcy("darcy_test_16.pt"));
  const auto t32 = fno::data::load_darcy(darcy("darcy_test_32.pt"), fno::data::LoadOptions().subsample(2));
  CHECK((t16.x.sizes() == torch::IntArrayRef{50, 1, 16, 16}));
  CHECK(torch::equal(t16.x, t32.x));
  CHECK(torch::equal(t16.y, t32.y));
}

TEST_CASE("n_samples keeps the first samples, and asking for more keeps all") {
  const auto few = fno::data::load_darcy(darcy("darcy_test_16.pt"), fno::data::LoadOptions().n_samples(7));
  const auto all = fno::data::load_darcy(darcy("darcy_test_16.pt"), fno::data::LoadOptions().n_samples(100));
  CHECK(few.x.size(0) == 7);
  CHECK(all.x.size(0) == 50);
  CHECK(torch::equal(few.y, all.y.narrow(0, 0, 7)));
}

TEST_CASE("format detection by content, whatever the extension") {
  CHECK(fno::data::detect_format(darcy("darcy_test_16.pt")) == fno::data::FileFormat::kTorchSave);
  const auto garbage = out_path("garbage.h5");
  std::ofstream(garbage) << "this is not data";
  check_error([&] { fno::data::detect_format(garbage); }, garbage, "neither a torch.save");
}

TEST_CASE(".pt files with channel layouts: (N, C, *S) and (N, *S, C) read as C channels") {
  using fno::data::Layout;
  torch::manual_seed(5);
  fno::TensorDict d;
  const auto x = torch::randn({4, 3, 8, 6});
  const auto y = torch::randn({4, 8, 6, 2});
  d.insert("x", x);
  d.insert("y", y);
  const auto p = out_path("channels.pt");
  fno::save_tensor_dict(d, p);
  const auto got = fno::data::load_darcy(p, fno::data::LoadOptions()
                                                .x_layout(Layout::kChannelsFirst)
                                                .y_layout(Layout::kChannelsLast)
                                                .subsample(2));
  CHECK((got.x.sizes() == torch::IntArrayRef{4, 3, 4, 3}));
  CHECK(torch::equal(got.x, x.slice(2, 0, 8, 2).slice(3, 0, 6, 2)));
  CHECK(torch::equal(got.y, y.permute({0, 3, 1, 2}).slice(2, 0, 8, 2).slice(3, 0, 6, 2)));
  // As grids: x is a 3D grid of rank 4 and y's shape differs.
  check_error([&] { fno::data::load_darcy(p); }, p,
              "'x' has shape (4, 3, 8, 6) but 'y' has (4, 8, 6, 2)");
}

TEST_CASE("bad .pt data files get one-line errors naming the file") {
  auto save = [](const std::string& name, const fno::TensorDict& d) {
    const auto p = out_path(name);
    fno::save_tensor_dict(d, p);
    return p;
  };
  fno::TensorDict nan_y;
  nan_y.insert("x", torch::ones({4, 8, 8}));
  auto y = torch::zeros({4, 8, 8});
  y[2][3][3] = std::numeric_limits<float>::quiet_NaN();
  nan_y.insert("y", y);
  const auto p1 = save("nan.pt", nan_y);
  check_error([&] { fno::data::load_darcy(p1); }, p1, "NaN or Inf in the outputs");

  fno::TensorDict mismatch;
  mismatch.insert("x", torch::ones({4, 8, 8}));
  mismatch.insert("y", torch::ones({4, 8, 9}));
  const auto p2 = save("mismatch.pt", mismatch);
  check_error([&] { fno::data::load_darcy(p2); }, p2, "'x' has shape (4, 8, 8) but 'y' has (4, 8, 9)");

  fno::TensorDict rank;
  rank.insert("x", torch::ones({4, 8}));
  rank.insert("y", torch::ones({4, 8}));
  const auto p3 = save("rank.pt", rank);
  check_error([&] { fno::data::load_darcy(p3); }, p3, "'x' has rank 2, expected 3");

  fno::TensorDict missing;
  missing.insert("a", torch::ones({4, 8, 8}));
  const auto p4 = save("missing.pt", missing);
  check_error([&] { fno::data::load_darcy(p4); }, p4, "no entry 'x' (found: a)");
  check_error(
      [&] { fno::data::load_darcy(p4, fno::data::LoadOptions().x_key_setting("data.x_key")); }, p4,
      "no entry 'x' (found: a); set data.x_key to its name");

  fno::TensorDict empty;
  empty.insert("x", torch::ones({0, 8, 8}));
  empty.insert("y", torch::ones({0, 8, 8}));
  const auto p5 = save("empty_n.pt", empty);
  check_error([&] { fno::data::load_darcy(p5); }, p5, "holds 0 samples");

  fno::TensorDict cplx;
  cplx.insert("x", torch::ones({2, 4, 4}, torch::kComplexFloat));
  cplx.insert("y", torch::ones({2, 4, 4}));
  const auto p6 = save("complex.pt", cplx);
  check_error([&] { fno::data::load_darcy(p6); }, p6, "non-numeric dtype");

  const auto p7 = out_path("no_such_file.pt");
  check_error([&] { fno::data::load_darcy(p7); }, p7, "cannot open");
  const auto p8 = out_path("empty_file.pt");
  std::ofstream(p8).close();
  check_error([&] { fno::data::load_darcy(p8); }, p8, "empty file");
}

TEST_CASE(
    ".pt files with 3D grids [N, R1, R2, R3] load, subsampled on every dim; rank 5 is refused") {
  torch::manual_seed(3);
  fno::TensorDict d;
  const auto x = torch::rand({4, 6, 8, 10}) > 0.5;  // a bool input, as neuraloperator's Darcy x
  const auto y = torch::randn({4, 6, 8, 10});
  d.insert("x", x);
  d.insert("y", y);
  const auto p = out_path("poisson3d.pt");
  fno::save_tensor_dict(d, p);
  const auto all = fno::data::load_darcy(p);
  CHECK((all.x.sizes() == torch::IntArrayRef{4, 1, 6, 8, 10}));
  CHECK(torch::equal(all.x.squeeze(1), x.to(torch::kFloat)));
  CHECK(torch::equal(all.y.squeeze(1), y));
  const auto sub = fno::data::load_darcy(p, fno::data::LoadOptions().subsample(3).n_samples(2));
  CHECK((sub.y.sizes() == torch::IntArrayRef{2, 1, 2, 3, 4}));
  CHECK(torch::equal(sub.y.squeeze(1),
                     y.narrow(0, 0, 2).slice(1, 0, 6, 3).slice(2, 0, 8, 3).slice(3, 0, 10, 3)));
  CHECK(sub.y.is_contiguous());

  fno::TensorDict rank5;
  rank5.insert("x", torch::ones({2, 4, 4, 4, 4}));
  rank5.insert("y", torch::ones({2, 4, 4, 4, 4}));
  const auto p5 = out_path("rank5.pt");
  fno::save_tensor_dict(rank5, p5);
  check_error([&] { fno::data::load_darcy(p5); }, p5,
              "'x' has rank 5, expected 3 (N, R1, R2) or 4 (N, R1, R2, R3)");
}

TEST_CASE("UnitGaussianNormalizer is channel-wise and inverts") {
  torch::manual_seed(0);
  auto data = torch::randn({20, 2, 6, 6}) * torch::tensor({3.0f, 0.5f}).view({1, 2, 1, 1}) + 4;
  fno::data::UnitGaussianNormalizer n;
  n.fit(data);
  CHECK((n.mean().sizes() == torch::IntArrayRef{1, 2, 1, 1}));
  auto t = n.transform(data);
  CHECK(t.mean({0, 2, 3}).abs().max().item<double>() < 1e-5);
  CHECK(t.std({0, 2, 3}).sub(1).abs().max().item<double>() < 1e-5);
  CHECK(torch::allclose(n.inverse_transform(t), data, 1e-5, 1e-5));
}

TEST_CASE("UnitGaussianNormalizer on 3D grids [N, C, R1, R2, R3]") {
  torch::manual_seed(1);
  auto data = torch::randn({6, 2, 4, 5, 3}) * torch::tensor({2.0f, 0.1f}).view({1, 2, 1, 1, 1}) - 1;
  fno::data::UnitGaussianNormalizer n;
  n.fit(data);
  CHECK((n.mean().sizes() == torch::IntArrayRef{1, 2, 1, 1, 1}));
  auto t = n.transform(data);
  CHECK(t.mean({0, 2, 3, 4}).abs().max().item<double>() < 1e-5);
  CHECK(t.std({0, 2, 3, 4}).sub(1).abs().max().item<double>() < 1e-5);
  CHECK(torch::allclose(n.inverse_transform(t), data, 1e-5, 1e-5));
}

TEST_CASE("UnitGaussianNormalizer pointwise: the FNO paper's per-point statistics, eps 1e-5") {
  torch::manual_seed(2);
  auto data =
      torch::randn({30, 2, 5, 4, 3}) * torch::linspace(0.5, 3.0, 120).view({1, 2, 5, 4, 3}) +
      torch::arange(120.0).view({1, 2, 5, 4, 3}) / 10.0;
  fno::data::UnitGaussianNormalizer n(fno::data::NormalizerMode::kPointwise);
  n.fit(data);
  CHECK((n.mean().sizes() == torch::IntArrayRef{1, 2, 5, 4, 3}));
  CHECK(n.eps() == 1e-5);
  // utilities3.py: (x - mean(x, 0)) / (std(x, 0) + 1e-5)
  const auto ref = (data - data.mean(0, true)) / (data.std(0, true, true) + 1e-5);
  auto t = n.transform(data);
  CHECK(torch::allclose(t, ref, 1e-6, 1e-6));
  CHECK(t.mean(0).abs().max().item<double>() < 1e-5);
  CHECK(torch::allclose(n.inverse_transform(t), data, 1e-5, 1e-5));
  // A checkpoint of the other mode does not fit; one sample has no std.
  fno::data::UnitGaussianNormalizer c;
  c.fit(data);
  CHECK_THROWS_WITH_AS(n.set_state(c.mean(), c.std()), doctest::Contains("pointwise"),
                       std::invalid_argument);
  fno::data::UnitGaussianNormalizer one(fno::data::NormalizerMode::kPointwise);
  CHECK_THROWS_WITH_AS(one.fit(data.narrow(0, 0, 1)),
                       doctest::Contains("at least 2 training samples"), std::invalid_argument);
}

TEST_CASE("epoch batches: seeded, reproducible, a permutation, and in order without shuffle") {
  auto a = fno::data::epoch_batches(10, 4, true, 7, 3);
  auto b = fno::data::epoch_batches(10, 4, true, 7, 3);
  auto c = fno::data::epoch_batches(10, 4, true, 7, 4);
  REQUIRE(a.size() == 3);
  CHECK(a.back().numel() == 2);
  CHECK(torch::equal(torch::cat(a), torch::cat(b)));
  CHECK(!torch::equal(torch::cat(a), torch::cat(c)));
  CHECK(torch::equal(std::get<0>(torch::cat(a).sort()), torch::arange(10)));
  CHECK(torch::equal(torch::cat(fno::data::epoch_batches(10, 3, false, 0, 0)), torch::arange(10)));
}
