// Benchmark data's metadata beside its fields (fno_data/benchmark.h): The
// Well's own statistics (stats.yaml) normalizing the windows as the_well
// 1.2.0's WellDataset(use_normalization=True) does, its scalars as input
// channels (its constant_scalars), its boundary conditions (WellDataset's
// padding codes), and bad metadata as one line naming the file and the field.
// tests/golden/make_benchmark_files.py writes the files and the goldens.
#include <doctest/doctest.h>

#include <fno_data/benchmark.h>
#include <fno_train/config.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "golden.h"

using fno::data::BenchmarkFormat;
using fno::data::BenchmarkOptions;
using fno::data::BenchmarkSet;
using fno::data::BoundaryKind;
using fno::test::check_one_line_error;
using fno::test::golden_path;

namespace {

torch::Tensor g(const std::string& key) {
  return fno::test::golden_tensor("benchmarks/goldens.pt", key);
}

BenchmarkOptions well(const std::string& split) {
  return BenchmarkOptions().format(BenchmarkFormat::kWell).split(split).history(2).horizon(1);
}

// The Well's [T, X, Y, C] as our [T * C, X, Y] (time-major channels).
torch::Tensor steps_as_channels(const torch::Tensor& t) {
  return t.permute({0, 3, 1, 2}).flatten(0, 1);
}

// Per-field statistics [C] as a channel normalizer's [1, C', 1, 1]: the first
// `n_tv` repeated for each of `steps` steps, the rest once (as the trainer).
torch::Tensor per_channel(const torch::Tensor& v, int64_t n_tv, int64_t steps) {
  return torch::cat({v.narrow(0, 0, n_tv).repeat({steps}), v.narrow(0, n_tv, v.size(0) - n_tv)})
      .reshape({1, -1, 1, 1});
}

}  // namespace

TEST_CASE("benchmark fields: stats.yaml normalizes windows as WellDataset(use_normalization)") {
  for (const std::string split : {"train", "valid"}) {
    INFO("split ", split);
    const BenchmarkSet set(golden_path("benchmarks/well"), well(split));
    CHECK(set.stats_file().find("stats.yaml") != std::string::npos);
    const auto [mi, si] = set.shipped_input_stats();
    const auto [mo, so] = set.shipped_target_stats();
    // density, tracer, velocity_x, velocity_y, viscosity: velocity's mean is
    // one number for both components, the tracer's std clipped at 1e-4.
    CHECK(torch::allclose(mi, torch::tensor({0.1, -0.2, 0.05, 0.05, 0.0}, torch::kFloat)));
    CHECK(torch::allclose(si, torch::tensor({0.9, 1e-4, 1.1, 0.8, 1.2}, torch::kFloat)));
    CHECK(torch::equal(mo, mi.narrow(0, 0, 4)));
    fno::data::UnitGaussianNormalizer in(fno::data::NormalizerMode::kBenchmark),
        out(fno::data::NormalizerMode::kBenchmark);
    in.set_state(per_channel(mi, 4, 2), per_channel(si, 4, 2));
    out.set_state(per_channel(mo, 4, 1), per_channel(so, 4, 1));
    const auto all = set.all_windows();
    const auto x = in.transform(all.x), y = out.transform(all.y);
    for (int64_t i = 0; i < set.n_windows(); ++i) {
      INFO("window ", i);
      const std::string k = "well.norm." + split + "." + std::to_string(i) + ".";
      const auto want = torch::cat(
          {steps_as_channels(g(k + "input_fields")), g(k + "constant_fields").permute({2, 0, 1})});
      CHECK(torch::allclose(x[i], want, 1e-6, 1e-5));
      CHECK(torch::allclose(y[i], steps_as_channels(g(k + "output_fields")), 1e-6, 1e-5));
    }
  }
}

TEST_CASE("benchmark fields: scalars as constant input channels equal WellDataset's") {
  const BenchmarkSet set(golden_path("benchmarks/well"),
                         well("valid").scalars({"reynolds", "gamma"}));
  CHECK(set.n_scalar_inputs() == 2);
  const auto& fields = set.input_field_channels();
  CHECK(std::vector<std::string>(fields.end() - 2, fields.end()) ==
        std::vector<std::string>{"reynolds", "gamma"});
  const auto names = set.input_channels();
  REQUIRE(names.size() == 2 * 4 + 1 + 2);
  CHECK(names[9] == "reynolds");
  CHECK(names[10] == "gamma");
  const auto all = set.all_windows();
  REQUIRE(all.x.size(1) == 11);
  // Windows of each trajectory (5 a trajectory): the reynolds of each differs.
  for (const int64_t i : {0, 5, 10, 14}) {
    INFO("window ", i);
    const auto s = g("well.valid." + std::to_string(i) + ".constant_scalars");  // [gamma, reynolds]
    CHECK(torch::equal(all.x[i][9], torch::full({6, 8}, s[1].item<float>())));
    CHECK(torch::equal(all.x[i][10], torch::full({6, 8}, s[0].item<float>())));
    // The fields' channels are those without scalars.
    const std::string k = "well.valid." + std::to_string(i) + ".";
    CHECK(torch::equal(all.x[i].narrow(0, 0, 8), steps_as_channels(g(k + "input_fields"))));
  }
  CHECK(g("well.valid.5.constant_scalars")[1].item<float>() !=
        g("well.valid.10.constant_scalars")[1].item<float>());
  // read_constant (the rollout's constant channels) ends in the scalars too.
  CHECK(torch::equal(set.read_constant(1), all.x[5].narrow(0, 8, 3)));
  // Statistics: a channel each; The Well leaves scalars as they are.
  CHECK(set.input_field_stats().first.size(0) == 7);
  const auto [m, sd] = set.shipped_input_stats();
  REQUIRE(m.size(0) == 7);
  CHECK(m[5].item<float>() == 0.0f);
  CHECK(sd[6].item<float>() == 1.0f);
  // gamma is the same everywhere: its std is 0.
  CHECK(set.input_field_stats().second[6].item<float>() == doctest::Approx(0.0).epsilon(1e-6));
}

TEST_CASE("benchmark fields: PDEArena's buo_y as a scalar channel") {
  const auto file = golden_path("benchmarks/pdearena/NavierStokes2D_train_tiny.h5");
  const BenchmarkSet set(
      file, BenchmarkOptions().format(BenchmarkFormat::kPdeArena).history(2).scalars({"buo_y"}));
  const auto all = set.all_windows();
  REQUIRE(all.x.size(1) == 2 * 3 + 1);
  const auto b = all.x.select(1, 6);  // [N, X, Y], one value per window
  CHECK(torch::equal(b, b.amax({1, 2}, true).expand_as(b)));
  CHECK(b.min().item<float>() >= 0.2f);
  CHECK(b.max().item<float>() <= 0.5f);
  CHECK(b[0][0][0].item<float>() != b[all.x.size(0) - 1][0][0].item<float>());
}

TEST_CASE("benchmark fields: boundary conditions equal WellDataset's padding codes") {
  const BenchmarkSet set(golden_path("benchmarks/well"), well("train"));
  const auto bcs = set.boundary_conditions();
  REQUIRE(bcs.size() == 2);
  const auto codes = g("well.boundary_conditions");  // [dims, 2]: WALL 0, OPEN 1, PERIODIC 2
  for (size_t d = 0; d < 2; ++d) {
    INFO("dim ", d);
    CHECK(static_cast<int>(bcs[d].low) == codes[static_cast<int64_t>(d)][0].item<int>());
    CHECK(static_cast<int>(bcs[d].high) == codes[static_cast<int64_t>(d)][1].item<int>());
  }
  CHECK(bcs[0].dim == "x");
  CHECK(bcs[0].periodic());
  CHECK(!bcs[1].periodic());
  CHECK(bcs[1].low == BoundaryKind::kWall);
  // PDEBench and PDEArena declare none.
  const BenchmarkSet arena(golden_path("benchmarks/pdearena/NavierStokes2D_train_tiny.h5"),
                           BenchmarkOptions().format(BenchmarkFormat::kPdeArena));
  CHECK(arena.boundary_conditions().empty());
}

TEST_CASE("benchmark fields: bad metadata is one line naming the file and the field") {
  const std::string well_dir = golden_path("benchmarks/well");
  const std::string shard = well_dir + "/data/train/tiny_shear_train_0.hdf5";
  check_one_line_error([&] { BenchmarkSet(well_dir, well("train").scalars({"mach"})); }, shard,
                       "data.scalars: no scalar 'mach' (found: gamma, reynolds, forcing)");
  check_one_line_error([&] { BenchmarkSet(well_dir, well("train").scalars({"forcing"})); }, shard,
                       "data.scalars: scalar 'forcing' varies in time");
  const auto arena = golden_path("benchmarks/pdearena/NavierStokes2D_train_tiny.h5");
  check_one_line_error(
      [&] {
        BenchmarkSet(arena, BenchmarkOptions().format(BenchmarkFormat::kPdeArena).scalars({"nu"}));
      },
      arena, "data.scalars: no scalar 'nu' in group 'train'");
  // A boundary condition The Well does not know.
  const auto bad_bc = golden_path("benchmarks/well_bad_bc.hdf5");
  const BenchmarkSet bad_set(bad_bc, well("train"));  // read only when asked
  check_one_line_error([&] { bad_set.boundary_conditions(); }, bad_bc,
                       "'boundary_conditions/y_wall': bc_type 'NEUMANN' is none of WALL, OPEN, "
                       "PERIODIC");
  // A stats.yaml that lacks a chosen field (a copy of the data set, its
  // statistics without the tracer).
  namespace fs = std::filesystem;
  const fs::path dir = fno::test::out_path("well_bad_stats");
  fs::remove_all(dir);
  fs::create_directories(dir / "data" / "train");
  fs::copy_file(shard, dir / "data" / "train" / "tiny_shear_train_0.hdf5");
  std::ofstream(dir / "stats.yaml") << "mean: {density: 0.1, velocity: 0.0, viscosity: 0.0}\n"
                                       "std: {density: 1.0, velocity: 1.0, viscosity: 1.0}\n";
  const BenchmarkSet copy(dir.string(), well("train"));
  check_one_line_error([&] { copy.shipped_input_stats(); }, (dir / "stats.yaml").string(),
                       "mean: no field 'tracer'");
  const BenchmarkSet fewer(dir.string(), well("train").fields({"density", "velocity"}));
  CHECK(fewer.shipped_input_stats().first.size(0) == 3);
  // No statistics shipped: PDEArena.
  const BenchmarkSet plain(arena, BenchmarkOptions().format(BenchmarkFormat::kPdeArena));
  check_one_line_error([&] { plain.shipped_input_stats(); }, arena,
                       "data.normalization benchmark: pdearena ships no statistics");
}

TEST_CASE(
    "benchmark fields: data.scalars, data.normalization benchmark and "
    "model.domain_padding_auto in the config") {
  const std::string yaml = R"(model:
  n_modes: [3, 4]
  domain_padding_auto: 0.25
data:
  format: well
  train_file: well
  scalars: [reynolds]
  normalization: benchmark
)";
  const auto cfg = fno::parse_config(yaml, "cfg.yaml");
  CHECK(cfg.data.scalars == std::vector<std::string>{"reynolds"});
  CHECK(cfg.data.normalization == fno::data::NormalizerMode::kBenchmark);
  CHECK(cfg.domain_padding_auto == 0.25);
  for (const auto& [set, expected] : std::vector<std::pair<std::string, std::string>>{
           {"data.format=pdebench", "data.normalization: benchmark needs data.format well"},
           {"model.domain_padding=[0.1]", "model.domain_padding must be [] then"},
           {"data.normalization=fitted", "data.normalization"}}) {
    INFO(set);
    try {
      fno::parse_config(yaml, "cfg.yaml", {set});
      FAIL("no error");
    } catch (const fno::ConfigError& e) {
      const std::string msg = e.what();
      INFO("message: ", msg);
      CHECK(msg.find(expected) != std::string::npos);
    }
  }
  try {
    fno::parse_config(yaml, "cfg.yaml", {"data.format=auto", "data.normalization=channel"});
    FAIL("no error");
  } catch (const fno::ConfigError& e) {
    CHECK(std::string(e.what()).find("data.scalars: needs a benchmark data.format") !=
          std::string::npos);
  }
}
