// fno/tiled.h on the CPU: a step over spatial tiles gives the whole-grid
// step's loss and gradients, in 2D and 3D, on even and odd grids, with uneven
// last tiles, fewer grid modes than weight modes, and every placement of the
// block inputs and the gradient. tests/test_gpu_tiled.cpp repeats this with
// the fused kernels, every precision and host memory.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fno/losses.h>
#include <fno/tiled.h>
#include <fno_engine/tiled_plan.h>

#include <functional>
#include <map>
#include <string>

#include "golden.h"
#include "grad_check.h"

using fno::TilePlace;
using fno::test::check_same;
using fno::test::float64_grads;
using fno::test::fp32_noise;
using fno::test::Grads;
using fno::test::rel_err;
using fno::test::run;

namespace {

struct Case {
  std::vector<int64_t> modes;
  std::vector<int64_t> shape;
  int64_t hidden;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {{6, 4}, {3, 1, 20, 13}, 8},      // even x odd, 4 tiles of 6 (the last of 2)
      {{8, 8}, {2, 2, 6, 7}, 8},        // fewer modes on the grid than in the weights
      {{5, 5}, {2, 1, 21, 15}, 8},      // odd x odd
      {{4, 4, 4}, {2, 1, 9, 8, 7}, 8},  // 3D
      {{4, 100}, {1, 1, 6, 120}, 8}     // 51 modes kept on the last dim: rfft, not GEMMs
  };
  return c;
}

// A CPU "host" store: a copy of each tile, handed back as a copy.
class CopyStore final : public fno::TileStore {
 public:
  explicit CopyStore(int* gets) : gets_(gets) {}
  void put(int64_t t, const at::Tensor& tile) override { tiles_[t] = tile.clone(); }
  at::Tensor get(int64_t t) override {
    ++*gets_;
    REQUIRE(tiles_.count(t) == 1);
    return tiles_[t].clone();
  }
  void clear() override { tiles_.clear(); }

 private:
  std::map<int64_t, at::Tensor> tiles_;
  int* gets_;
};

}  // namespace

TEST_CASE("a step over tiles gives the whole-grid step's loss and gradients (2D, 3D, CPU)") {
  for (const auto& c : cases()) {
    INFO("input shape ", torch::IntArrayRef(c.shape), ", modes ", torch::IntArrayRef(c.modes));
    torch::manual_seed(5);
    fno::FNO model(fno::FNOOptions(c.modes, c.shape[1], 1, c.hidden).n_layers(3));
    torch::manual_seed(6);
    const auto x = torch::randn(c.shape);
    auto y_shape = c.shape;
    y_shape[1] = 1;
    // Targets off zero mean: with y ~ N(0, 1) the output's gradient sums to
    // nearly zero over the grid, and the projection's last bias gradient (that
    // sum) amplifies any rounding in the output by 1e3.
    const auto y = torch::randn(y_shape) + 1;
    const fno::H1Loss h1(fno::H1LossOptions().d(static_cast<int64_t>(c.modes.size())));
    const auto loss = [&](const torch::Tensor& out, const torch::Tensor& yy) {
      return h1(out, yy);
    };
    const auto ref = run(model, [&] {
      auto l = loss(model->forward(x), y);
      l.backward();
      return l.detach();
    });
    const auto f64 = float64_grads(model, x, y, loss);
    const double noise = fp32_noise(ref, f64);
    MESSAGE("the whole-grid fp32 step's worst gradient error against float64: ", noise);
    int gets = 0;
    const fno::TileStoreFactory host = [&](const std::string&) {
      return std::make_unique<CopyStore>(&gets);
    };
    const auto all = [](TilePlace p) { return std::vector<TilePlace>(3, p); };
    struct Variant {
      std::string name;
      fno::TiledPlan plan;
    };
    std::vector<Variant> variants;
    for (int64_t rows : {1, 4, 6, 100}) {
      fno::TiledPlan p;
      p.tile_rows = rows;
      variants.push_back({"default", p});
    }
    {
      fno::TiledPlan p;
      p.tile_rows = 4;
      p.inputs = all(TilePlace::kRecompute);
      p.keep_latest = false;
      variants.push_back({"all recomputed, nothing kept", p});
      p.inputs = {TilePlace::kRecompute, TilePlace::kHost, TilePlace::kRecompute};
      p.gradient = TilePlace::kHost;
      variants.push_back({"block 1 input and the gradient on the host", p});
      p.inputs = all(TilePlace::kHost);
      p.keep_latest = true;
      variants.push_back({"every input on the host, keep latest", p});
      p.inputs = {TilePlace::kHost, TilePlace::kRecompute, TilePlace::kHost};
      p.gradient = TilePlace::kDevice;
      variants.push_back({"block 1 remade from block 0's host input, announced early", p});
      p.gradient = TilePlace::kHost;
      p.inputs = all(TilePlace::kDevice);
      p.gradient = TilePlace::kDevice;
      p.keep_latest = false;
      variants.push_back({"every input on the device", p});
    }
    for (const auto& v : variants) {
      INFO(v.name, ": ", v.plan.to_string());
      fno::TiledStep step(model, v.plan, host);
      const auto got = run(model, [&] { return step.forward_backward(x, y, loss); });
      check_same(got, ref, f64, noise);
      // A second step reuses the stores.
      const auto again = run(model, [&] { return step.forward_backward(x, y, loss); });
      check_same(again, ref, f64, noise);
      torch::NoGradGuard no_grad;
      CHECK(rel_err(step.forward(x), model->forward(x)) <= 1e-6);
    }
    CHECK(gets > 0);
  }
}

TEST_CASE("tiled steps refuse what they cannot run, in one line") {
  fno::FNO one_d(fno::FNOOptions({4}, 1, 1, 8));
  CHECK_THROWS_WITH(fno::TiledStep(one_d, fno::TiledPlan()), doctest::Contains("2D or 3D model"));
  fno::FNO padded(fno::FNOOptions({4, 4}, 1, 1, 8).domain_padding({0.25}));
  CHECK_THROWS_WITH(fno::TiledStep(padded, fno::TiledPlan()), doctest::Contains("domain_padding"));
  fno::FNO model(fno::FNOOptions({4, 4}, 1, 1, 8));
  fno::TiledPlan zero;
  zero.tile_rows = 0;
  CHECK_THROWS_WITH(fno::TiledStep(model, zero),
                    doctest::Contains("tile_rows must be >= 1, got 0"));
  fno::TiledPlan host;
  host.inputs = std::vector<TilePlace>(4, TilePlace::kHost);
  fno::TiledStep no_host(model, host);
  const auto x = torch::randn({1, 1, 8, 8});
  CHECK_THROWS_WITH(no_host.forward(x), doctest::Contains("no host store was given"));
  fno::TiledPlan short_plan;
  short_plan.inputs = {TilePlace::kDevice};
  fno::TiledStep wrong(model, short_plan);
  CHECK_THROWS_WITH(wrong.forward(x), doctest::Contains("places 1 block inputs, the model has 4"));
  CHECK_THROWS_WITH(fno::parse_tile_place("disk"), doctest::Contains("'disk'"));
  fno::TiledPlan p;
  p.tile_rows = 96;
  p.inputs = {TilePlace::kRecompute, TilePlace::kHost, TilePlace::kDevice, TilePlace::kHost};
  p.gradient = TilePlace::kHost;
  p.keep_latest = false;
  CHECK(fno::parse_tiled_plan(p.to_string()).to_string() == p.to_string());
  CHECK(fno::parse_tiled_plan(fno::TiledPlan().to_string()).to_string() ==
        fno::TiledPlan().to_string());
  for (const std::string bad : {"tile_rows=0, inputs=host, gradient=device, keep_latest=1",
                                "tile_rows=8, inputs=disk, gradient=device, keep_latest=1",
                                "tile_rows=8, inputs=host, gradient=recompute, keep_latest=1",
                                "tile_rows=8, inputs=host", "nonsense"}) {
    INFO(bad);
    CHECK_THROWS_WITH_AS(fno::parse_tiled_plan(bad), doctest::Contains(bad.c_str()),
                         std::invalid_argument);
  }
}

TEST_CASE("tiled plans for a budget: estimates, candidates within it, the least memory") {
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2));
  const std::vector<int64_t> shape{2, 1, 4096, 4096};
  fno::TiledContext ctx;
  ctx.base_bytes = int64_t{100} << 20;
  ctx.grad_bytes = int64_t{10} << 20;
  const int64_t gib = int64_t{1} << 30;
  // One block input of one entry at 4096^2: 2 GiB.
  CHECK(fno::tiled_sizes(model, {1, 1, 4096, 4096}).hidden == 2 * gib);
  const auto tight = fno::tiled_candidates(model, shape, 4 * gib, 0, ctx);
  REQUIRE(!tight.empty());
  for (const auto& c : tight) {
    INFO(c.to_string());
    CHECK(c.peak_bytes <= 4 * gib);
    CHECK(fno::parse_tiled_choice(c.to_string()).to_string() == c.to_string());
    // As numbers (one rank's choice sent to the others), and back.
    const auto v = fno::encode_tiled_choice(c, model->options.n_layers());
    CHECK(v.size() == 4 + static_cast<size_t>(model->options.n_layers()));
    CHECK(fno::decode_tiled_choice(v).to_string() == c.to_string());
  }
  const auto roomy = fno::tiled_candidates(model, shape, 40 * gib, 0, ctx);
  REQUIRE(!roomy.empty());
  CHECK(roomy.front().step_ms <= tight.front().step_ms);
  // No host memory: only plans that keep or remake everything.
  for (const auto& c : fno::tiled_candidates(model, shape, 40 * gib, 1, ctx)) {
    INFO(c.to_string());
    CHECK(c.host_bytes <= 1);
  }
  const auto least = fno::least_memory_tiled(model, shape, ctx);
  CHECK(least.peak_bytes < 2 * gib);  // mostly the loss's full-size temporaries (1 channel)
  CHECK(fno::tiled_candidates(model, shape, least.peak_bytes / 2, 0, ctx).empty());
  // The least-memory plan is a candidate: a budget that holds it has plans, on
  // small grids too (tiles of a few rows).
  for (const std::vector<int64_t> s : {shape, std::vector<int64_t>{2, 1, 512, 512}}) {
    const auto l = fno::least_memory_tiled(model, s, ctx);
    const auto fit = fno::tiled_candidates(model, s, l.peak_bytes, 0, ctx);
    REQUIRE(!fit.empty());
    CHECK(fit.front().peak_bytes <= l.peak_bytes);
  }
  // A model that cannot run tiled has no candidates.
  fno::FNO one_d(fno::FNOOptions({16}, 1, 1, 32));
  CHECK(fno::tiled_candidates(one_d, {2, 1, 4096}, 40 * gib, 0, ctx).empty());
  CHECK_THROWS_WITH_AS(fno::parse_tiled_choice("tiled micro_batches=0; tile_rows=1"),
                       doctest::Contains("micro_batches"), std::invalid_argument);
}
