// Benchmark data as it ships (fno_data/benchmark.h) against what the
// benchmarks' own readers return for the same indices: The Well's WellDataset
// (the_well 1.2.0), and line-for-line re-readings of PDEBench's and
// PDEArena's loaders (tests/golden/make_benchmark_files.py writes the files
// and the goldens).
#include <doctest/doctest.h>

#include <fno_data/benchmark.h>
#include <fno_train/config.h>

#include <torch/torch.h>

#include "golden.h"

using fno::data::BenchmarkFormat;
using fno::data::BenchmarkOptions;
using fno::data::BenchmarkSet;
using fno::test::check_one_line_error;
using fno::test::golden_path;

namespace {

const char* kGoldens = "benchmarks/goldens.pt";

torch::Tensor g(const std::string& key) { return fno::test::golden_tensor(kGoldens, key); }

BenchmarkOptions well(const std::string& split) {
  return BenchmarkOptions().format(BenchmarkFormat::kWell).split(split).history(2).horizon(1);
}

// The Well's [T, X, Y, C] as our [T * C, X, Y] (time-major channels).
torch::Tensor steps_as_channels(const torch::Tensor& t) {
  return t.permute({0, 3, 1, 2}).flatten(0, 1);
}

}  // namespace

TEST_CASE("benchmark data: The Well's shards, windows equal WellDataset's samples") {
  for (const std::string split : {"train", "valid"}) {
    INFO("split ", split);
    const BenchmarkSet set(golden_path("benchmarks/well"), well(split));
    CHECK(set.files().size() == 2);  // two shards
    CHECK(set.n_trajectories() == 3);
    CHECK(set.n_steps() == 7);
    CHECK(set.grid() == std::vector<int64_t>{6, 8});  // not square
    REQUIRE(set.n_windows() == g("well." + split + ".len").item<int64_t>());
    CHECK(set.input_field_channels() ==
          std::vector<std::string>{"density", "tracer", "velocity_x", "velocity_y", "viscosity"});
    CHECK(set.target_field_channels() ==
          std::vector<std::string>{"density", "tracer", "velocity_x", "velocity_y"});
    CHECK(set.input_channels().front() == "t0:density");
    const auto all = set.all_windows();
    REQUIRE(all.x.sizes() == torch::IntArrayRef({15, 2 * 4 + 1, 6, 8}));
    REQUIRE(all.y.sizes() == torch::IntArrayRef({15, 4, 6, 8}));
    for (int64_t i = 0; i < set.n_windows(); ++i) {
      INFO("window ", i);
      const std::string k = "well." + split + "." + std::to_string(i) + ".";
      // Inputs: the history's time-varying fields, then the constant field.
      const auto x = torch::cat(
          {steps_as_channels(g(k + "input_fields")), g(k + "constant_fields").permute({2, 0, 1})});
      CHECK(torch::equal(all.x[i], x));
      CHECK(torch::equal(all.y[i], steps_as_channels(g(k + "output_fields"))));
      // One window read alone equals the same window read with the others.
      const auto one = set.windows(i, i + 1);
      CHECK(torch::equal(one.x[0], all.x[i]));
    }
  }
}

TEST_CASE("benchmark data: a choice of fields maps to input and output channels") {
  const BenchmarkSet set(golden_path("benchmarks/well"),
                         well("train").fields({"velocity", "density"}).target_fields({"density"}));
  CHECK(set.input_field_channels() ==
        std::vector<std::string>{"velocity_x", "velocity_y", "density"});
  CHECK(set.output_channels() == std::vector<std::string>{"t0:density"});
  const auto w = set.windows(3, 4);
  const auto in = g("well.train.3.input_fields");  // [2, X, Y, C]: density, tracer, vx, vy
  const auto want = torch::stack({in[0].select(-1, 2), in[0].select(-1, 3), in[0].select(-1, 0),
                                  in[1].select(-1, 2), in[1].select(-1, 3), in[1].select(-1, 0)});
  CHECK(torch::equal(w.x[0], want));
  CHECK(torch::equal(w.y[0][0], g("well.train.3.output_fields")[0].select(-1, 0)));
}

TEST_CASE("benchmark data: VRMSE per field equals the_well's") {
  // [B, To, X, Y, C] -> [B * To, C, X, Y]
  auto as_ours = [](const torch::Tensor& t) { return t.flatten(0, 1).permute({0, 3, 1, 2}); };
  const auto ours =
      fno::data::vrmse(as_ours(g("well.vrmse.pred")), as_ours(g("well.vrmse.target")));
  const auto theirs = g("well.vrmse.value").flatten(0, 1);  // [B * To, C]
  REQUIRE(ours.sizes() == theirs.sizes());
  CHECK((ours - theirs).abs().max().item<double>() < 1e-6);
}

TEST_CASE("benchmark data: nRMSE per field equals PDEBench's metric_func") {
  // PDEBench's layout (batch, nx, ny, timesteps, nc) and its err_nRMSE before
  // the mean over the batch, re-read from pdebench/models/metrics.py.
  torch::manual_seed(3);
  const auto target = torch::randn({5, 6, 8, 2, 3}, torch::kDouble) + 0.5;
  const auto pred = target + 0.2 * torch::randn({5, 6, 8, 2, 3}, torch::kDouble);
  const int64_t nb = 5, nc = 3, nt = 2;
  const auto p = pred.permute({0, 4, 1, 2, 3}).reshape({nb, nc, -1, nt});
  const auto t = target.permute({0, 4, 1, 2, 3}).reshape({nb, nc, -1, nt});
  const auto err_mean = (p - t).pow(2).mean(2).sqrt();
  const auto theirs = err_mean / t.pow(2).mean(2).sqrt();  // [nb, nc, nt]
  // Ours per step: [B, C, X, Y] for each of the nt steps.
  for (int64_t k = 0; k < nt; ++k) {
    const auto ours = fno::data::nrmse(pred.select(3, k).permute({0, 3, 1, 2}),
                                       target.select(3, k).permute({0, 3, 1, 2}));
    CHECK((ours - theirs.select(2, k)).abs().max().item<double>() < 1e-12);
  }
}

TEST_CASE("benchmark data: PDEBench's one-file and per-sample layouts and its splits") {
  struct Case {
    const char* file;
    const char* golden;
    int64_t n_fields;
  };
  for (const Case c : {Case{"benchmarks/pdebench/2D_CFD_tiny.hdf5", "pdebench.single", 4},
                       Case{"benchmarks/pdebench/2D_diff-react_tiny.h5", "pdebench.mult", 2}}) {
    for (const std::string split : {"train", "test"}) {
      INFO(std::string(c.file), " split ", split);
      const auto data = g(std::string(c.golden) + "." + split);  // [n, X, Y, T, V]
      const BenchmarkSet set(
          golden_path(c.file),
          BenchmarkOptions().format(BenchmarkFormat::kPdeBench).split(split).history(2).horizon(2));
      REQUIRE(set.n_trajectories() == data.size(0));
      CHECK(set.grid() == std::vector<int64_t>{6, 8});
      const int64_t per = data.size(3) - 4 + 1;
      REQUIRE(set.n_windows() == data.size(0) * per);
      const auto all = set.all_windows();
      for (int64_t n = 0; n < data.size(0); ++n) {
        const auto traj = data[n].permute({2, 3, 0, 1});  // [T, V, X, Y]
        for (int64_t s = 0; s < per; ++s) {
          CHECK(torch::equal(all.x[n * per + s], traj.narrow(0, s, 2).flatten(0, 1)));
          CHECK(torch::equal(all.y[n * per + s], traj.narrow(0, s + 2, 2).flatten(0, 1)));
        }
      }
      CHECK(all.x.size(1) == 2 * c.n_fields);
    }
  }
  const auto cfd = BenchmarkSet(golden_path("benchmarks/pdebench/2D_CFD_tiny.hdf5"),
                                BenchmarkOptions().format(BenchmarkFormat::kPdeBench));
  CHECK(cfd.input_field_channels() ==
        std::vector<std::string>{"density", "pressure", "Vx", "Vy"});  // PDEBench's order
}

TEST_CASE("benchmark data: PDEArena's groups, windows equal its datapipe's") {
  for (const std::string split : {"train", "valid"}) {
    INFO("split ", split);
    // The folder: the files whose names hold the split.
    const BenchmarkSet set(
        golden_path("benchmarks/pdearena"),
        BenchmarkOptions().format(BenchmarkFormat::kPdeArena).split(split).history(2).horizon(1));
    CHECK(set.files().size() == 1);
    CHECK(set.grid() == std::vector<int64_t>{8, 6});
    CHECK(set.input_field_channels() == std::vector<std::string>{"u", "vx", "vy"});
    const int64_t per = 6 - 3 + 1;
    REQUIRE(set.n_windows() == set.n_trajectories() * per);
    const auto all = set.all_windows();
    for (int64_t n = 0; n < set.n_trajectories(); ++n) {
      for (int64_t s = 0; s < per; ++s) {
        const std::string k =
            "pdearena." + split + "." + std::to_string(n) + "." + std::to_string(s);
        CHECK(torch::equal(all.x[n * per + s], g(k + ".data").flatten(0, 1)));
        CHECK(torch::equal(all.y[n * per + s], g(k + ".labels").flatten(0, 1)));
      }
    }
  }
}

TEST_CASE("benchmark data: per-field statistics over the training split") {
  const BenchmarkSet set(golden_path("benchmarks/well"), well("train"));
  std::vector<torch::Tensor> steps, constants;
  for (int64_t n = 0; n < set.n_trajectories(); ++n) {
    steps.push_back(set.read_steps(n, 0, set.n_steps(), false));  // [T, 4, X, Y]
    constants.push_back(set.read_constant(n).unsqueeze(0).expand({set.n_steps(), -1, -1, -1}));
  }
  // [N * T, C, X, Y] -> per channel over everything else
  const auto v = torch::cat({torch::cat(steps), torch::cat(constants)}, 1)
                     .transpose(0, 1)
                     .flatten(1)
                     .to(torch::kDouble);
  const auto [mean, std] = set.input_field_stats();
  CHECK(torch::allclose(mean.to(torch::kDouble), v.mean(1), 1e-5, 1e-6));
  CHECK(torch::allclose(std.to(torch::kDouble), v.std(1), 1e-5, 1e-6));
  CHECK(set.target_field_stats().first.size(0) == 4);
}

TEST_CASE("benchmark data: select_rows reads a band of rows; grid and statistics stay whole") {
  const std::string well_dir = golden_path("benchmarks/well");
  struct Case {
    std::string path;
    BenchmarkOptions options;
  };
  const std::vector<Case> cases{
      // a constant field, a vector field and a scalar; subsampled
      {well_dir, well("train").scalars({"reynolds"})},
      {well_dir, well("train").subsample(2)},
      // PDEBench's per-sample groups (T, X, Y, V), PDEArena with its scalar
      {golden_path("benchmarks/pdebench/2D_diff-react_tiny.h5"),
       BenchmarkOptions().format(BenchmarkFormat::kPdeBench).history(2)},
      {golden_path("benchmarks/pdearena"),
       BenchmarkOptions().format(BenchmarkFormat::kPdeArena).history(2).scalars({"buo_y"})}};
  for (const auto& c : cases) {
    INFO(c.path, " subsample ", c.options.subsample());
    const BenchmarkSet whole(c.path, c.options);
    BenchmarkSet band(c.path, c.options);
    const int64_t r0 = 1, n = whole.grid()[0] - 2;
    band.select_rows(r0, n);
    CHECK(band.grid() == whole.grid());
    CHECK(band.read_grid() == std::vector<int64_t>{n, whole.grid()[1]});
    CHECK(whole.read_grid() == whole.grid());
    const auto a = whole.all_windows(), b = band.all_windows();
    CHECK(torch::equal(b.x, a.x.narrow(2, r0, n)));
    CHECK(torch::equal(b.y, a.y.narrow(2, r0, n)));
    CHECK(torch::equal(band.read_steps(1, 0, 3, true),
                       whole.read_steps(1, 0, 3, true).narrow(2, r0, n)));
    CHECK(torch::equal(band.read_constant(1), whole.read_constant(1).narrow(1, r0, n)));
    CHECK(torch::equal(band.input_field_stats().first, whole.input_field_stats().first));
    CHECK(torch::equal(band.input_field_stats().second, whole.input_field_stats().second));
    CHECK(torch::equal(band.target_field_stats().second, whole.target_field_stats().second));
  }
  BenchmarkSet set(well_dir, well("train"));
  check_one_line_error([&] { set.select_rows(4, 3); },
                       well_dir + "/data/train/tiny_shear_train_0.hdf5",
                       "rows [4, 7) are not within the grid's 6");
}

TEST_CASE("benchmark data: bad input is one line naming the file and the field") {
  const std::string well_dir = golden_path("benchmarks/well");
  const std::string shard = well_dir + "/data/train/tiny_shear_train_0.hdf5";
  check_one_line_error(
      [&] { BenchmarkSet(well_dir, well("train").fields({"pressure"})); }, shard,
      "data.fields: no field 'pressure' (found: density, tracer, viscosity, velocity)");
  check_one_line_error([&] { BenchmarkSet(well_dir, well("train").target_fields({"viscosity"})); },
                       shard, "field 'viscosity' is constant in time");
  check_one_line_error([&] { BenchmarkSet(well_dir, well("train").history(6).horizon(2)); }, shard,
                       "dataset 't0_fields/density' holds 7 time steps, fewer than "
                       "data.history 6 + data.horizon 2");
  check_one_line_error([&] { BenchmarkSet(well_dir, well("test")); }, well_dir, "no split 'test'");
  const std::string arena = golden_path("benchmarks/pdearena/NavierStokes2D_train_tiny.h5");
  check_one_line_error(
      [&] {
        BenchmarkSet(arena, BenchmarkOptions().format(BenchmarkFormat::kPdeArena).split("valid"));
      },
      arena, "no split 'valid' (no group 'valid'; found: train)");
  const std::string cfd = golden_path("benchmarks/pdebench/2D_CFD_tiny.hdf5");
  check_one_line_error(
      [&] {
        BenchmarkSet(cfd, BenchmarkOptions().format(BenchmarkFormat::kPdeBench).split("valid"));
      },
      cfd, "no split 'valid'");
  // A field of the wrong rank: PDEArena's u (N, T, X) instead of (N, T, X, Y).
  const std::string bad = fno::test::out_path("pdearena_bad_rank.h5");
  std::remove(bad.c_str());
  fno::data::write_hdf5(bad, {{"train/u", torch::zeros({2, 5, 4})}});
  check_one_line_error(
      [&] { BenchmarkSet(bad, BenchmarkOptions().format(BenchmarkFormat::kPdeArena)); }, bad,
      "dataset 'train/u' has rank 3, expected 4 (N, T, X, Y)");
  // A Well field whose shape disagrees with its attributes.
  const std::string cfd_bad = fno::test::out_path("pdebench_bad_rank.h5");
  std::remove(cfd_bad.c_str());
  fno::data::write_hdf5(cfd_bad,
                        {{"density", torch::zeros({3, 5, 4, 4})}, {"Vx", torch::zeros({3, 5, 4})}});
  check_one_line_error(
      [&] { BenchmarkSet(cfd_bad, BenchmarkOptions().format(BenchmarkFormat::kPdeBench)); },
      cfd_bad, "dataset 'Vx' has shape (3, 5, 4), expected (3, 5, 4, 4)");
}

TEST_CASE("benchmark data: data.format and its keys in the config") {
  const std::string yaml = R"(model:
  n_modes: [3, 4]
data:
  format: well
  train_file: well
  fields: [density, velocity]
  target_fields: [density]
  history: 4
  horizon: 2
  test:
    - {file: well, split: valid}
)";
  const auto cfg = fno::parse_config(yaml, "cfg.yaml");
  CHECK(cfg.data.format == fno::DataFormat::kWell);
  CHECK(cfg.data.fields == std::vector<std::string>{"density", "velocity"});
  CHECK(cfg.data.target_fields == std::vector<std::string>{"density"});
  CHECK(cfg.data.history == 4);
  CHECK(cfg.data.horizon == 2);
  CHECK(cfg.data.split == "train");
  CHECK(cfg.data.tests.at(0).split == "valid");
  for (const auto& [set, expected] : std::vector<std::pair<std::string, std::string>>{
           {"data.x_key=u", "data.x_key: not used with data.format well"},
           {"data.problem=ns", "data.problem: must be darcy"},
           {"data.y_layout=channels_first", "data.y_layout: not used with data.format well"},
           {"data.history=0", "data.history"},
           {"data.format=netcdf", "data.format"}}) {
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
}
