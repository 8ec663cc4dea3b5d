// A benchmark split streamed (data.stream; fno_data/benchmark_stream.h,
// train/src/window_stream.h): windows read by index equal the resident
// windows, in any order, with repeats and overlaps; the pointwise statistics
// of one pass equal the resident fit; the stream hands an epoch's batches in
// the resident order, across epochs, with a read error reaching the caller.
#include <doctest/doctest.h>

#include <fno_data/benchmark_stream.h>
#include <fno_train/config.h>

#include <torch/torch.h>

#include <stdexcept>

#include "../train/src/window_stream.h"
#include "golden.h"

using fno::data::BenchmarkFormat;
using fno::data::BenchmarkOptions;
using fno::data::BenchmarkSet;
using fno::test::golden_path;

namespace {

BenchmarkOptions well(int64_t history, int64_t horizon) {
  return BenchmarkOptions()
      .format(BenchmarkFormat::kWell)
      .split("train")
      .history(history)
      .horizon(horizon);
}

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  const auto c = t.to(torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TEST_CASE("benchmark stream: windows by index equal the resident windows") {
  for (const auto& [h, f] : {std::pair<int64_t, int64_t>{2, 1}, {3, 2}, {1, 1}}) {
    INFO("history ", h, ", horizon ", f);
    const BenchmarkSet set(golden_path("benchmarks/well"), well(h, f));
    const auto all = set.all_windows();
    const int64_t n = set.n_windows();
    // Window w's trajectory and start, as the windows are ordered.
    int64_t w = 0;
    for (int64_t t = 0; t < set.n_trajectories(); ++t) {
      for (int64_t s = 0; s + h + f <= set.n_steps(); ++s, ++w) {
        CHECK(set.window_at(w) == std::pair<int64_t, int64_t>{t, s});
      }
    }
    CHECK(w == n);
    CHECK_THROWS(set.window_at(n));
    torch::manual_seed(3);
    // Shuffled (neighbours overlap), every window once; then repeats and one alone.
    for (const auto& index :
         {torch::randperm(n), torch::tensor(std::vector<int64_t>{4, 4, 0, n - 1, 1, 4}),
          torch::tensor(std::vector<int64_t>{n - 1})}) {
      const auto p = fno::data::read_windows(set, to_vector(index));
      CHECK(torch::equal(p.x, all.x.index_select(0, index)));
      CHECK(torch::equal(p.y, all.y.index_select(0, index)));
    }
    // Into given tensors; tensors of the wrong shape are refused.
    const auto [xs, ys] = fno::data::window_shapes(set, 2);
    auto x = torch::empty(xs), y = torch::empty(ys);
    fno::data::read_windows_into(set, {2, 1}, x, y);
    CHECK(torch::equal(x, all.x.narrow(0, 1, 2).flip(0)));
    auto bad = torch::empty(ys);
    CHECK_THROWS_WITH(fno::data::read_windows_into(set, {2, 1}, bad, y),
                      doctest::Contains("read_windows_into: x"));
  }
}

TEST_CASE("benchmark stream: pointwise statistics of one pass equal the resident fit") {
  const BenchmarkSet set(golden_path("benchmarks/well"), well(2, 1));
  const auto all = set.all_windows();
  fno::data::UnitGaussianNormalizer nx(fno::data::NormalizerMode::kPointwise),
      ny(fno::data::NormalizerMode::kPointwise);
  nx.fit(all.x);
  ny.fit(all.y);
  for (const int64_t chunk : {1, 4, 100}) {
    INFO("chunk ", chunk);
    const auto s = fno::data::pointwise_window_stats(set, chunk);
    CHECK(s.x_mean.sizes() == nx.mean().sizes());
    CHECK(torch::allclose(s.x_mean, nx.mean(), 1e-6, 1e-6));
    CHECK(torch::allclose(s.x_std, nx.std(), 1e-6, 1e-6));
    CHECK(torch::allclose(s.y_mean, ny.mean(), 1e-6, 1e-6));
    CHECK(torch::allclose(s.y_std, ny.std(), 1e-6, 1e-6));
  }
}

TEST_CASE("benchmark stream: an epoch's batches in the resident order, across epochs") {
  auto set = std::make_shared<const BenchmarkSet>(golden_path("benchmarks/well"), well(2, 1));
  const auto all = set->all_windows();
  const int64_t n = set->n_windows(), batch = 4, epochs = 3;
  const auto batches = [&](int64_t epoch) {
    return fno::data::epoch_batches(n, batch, true, 7, epoch);
  };
  fno::detail::WindowStream ws(set, batches, epochs, torch::kCPU);
  for (int64_t e = 1; e <= epochs; ++e) {
    const auto order = batches(e);
    REQUIRE(ws.epoch(e).size() == order.size());
    for (size_t b = 0; b < order.size(); ++b) {
      CHECK(torch::equal(ws.epoch(e)[b], order[b]));
      const auto [x, y] = ws.batch(e, static_cast<int64_t>(b));
      CHECK(torch::equal(x, all.x.index_select(0, order[b])));
      CHECK(torch::equal(y, all.y.index_select(0, order[b])));
    }
  }
  // Out of order (a resumed epoch): that batch, read at once.
  const auto [x, y] = ws.batch(2, 3);
  CHECK(torch::equal(x, all.x.index_select(0, batches(2)[3])));
  const auto [wait_s, read_s] = ws.take_times();
  CHECK(read_s > 0);
  CHECK(wait_s >= 0);
}

TEST_CASE("benchmark stream: a read that fails reaches the caller") {
  auto set = std::make_shared<const BenchmarkSet>(golden_path("benchmarks/well"), well(2, 1));
  // An index past the windows: the read throws on the I/O thread.
  const auto batches = [&](int64_t) { return std::vector<torch::Tensor>{torch::tensor({0, 99})}; };
  fno::detail::WindowStream ws(set, batches, 1, torch::kCPU);
  CHECK_THROWS_WITH(ws.batch(1, 0), doctest::Contains("window_at: window 99"));
}

TEST_CASE("benchmark stream: on a GPU, batches copied on a side stream hold the windows") {
  if (!torch::cuda::is_available()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  auto set = std::make_shared<const BenchmarkSet>(golden_path("benchmarks/well"), well(2, 1));
  const auto all = set->all_windows();
  const auto batches = [&](int64_t epoch) {
    return fno::data::epoch_batches(set->n_windows(), 4, true, 7, epoch);
  };
  fno::detail::WindowStream ws(set, batches, 2, torch::Device(torch::kCUDA, 0));
  for (int64_t e = 1; e <= 2; ++e) {
    const auto order = batches(e);
    for (size_t b = 0; b < order.size(); ++b) {
      const auto [x, y] = ws.batch(e, static_cast<int64_t>(b));
      REQUIRE(x.is_cuda());
      // Used on the current stream at once: the copies are done before.
      CHECK(torch::equal((x * 1).cpu(), all.x.index_select(0, order[b])));
      CHECK(torch::equal((y * 1).cpu(), all.y.index_select(0, order[b])));
    }
  }
}

TEST_CASE("benchmark stream: data.stream and data.host_memory_limit in the config") {
  const std::string well_cfg = "data:\n  format: well\n  train_file: set\n";
  const auto c = fno::parse_config(well_cfg, "cfg.yaml");
  CHECK(c.data.stream == fno::DataStream::kAuto);
  CHECK(c.data.host_memory_limit == 0);
  const auto on =
      fno::parse_config(well_cfg, "cfg.yaml", {"data.stream=on", "data.host_memory_limit=2GiB"});
  CHECK(on.data.stream == fno::DataStream::kOn);
  CHECK(on.data.host_memory_limit == 2LL << 30);
  // The limit matters to auto alone: a note says so.
  REQUIRE(on.notes.size() == 1);
  CHECK(on.notes[0] == "data.host_memory_limit: ignored by data.stream on (only auto compares)");
  CHECK(fno::parse_config(well_cfg, "cfg.yaml", {"data.host_memory_limit=1MiB"}).notes.empty());
  // Only the benchmark formats stream.
  CHECK_THROWS_WITH_AS(fno::parse_config("data:\n  train_file: a.pt\n  stream: on\n", "cfg.yaml"),
                       doctest::Contains("data.stream: on streams the benchmark formats' windows"),
                       fno::ConfigError);
  CHECK_THROWS_WITH_AS(fno::parse_config(well_cfg, "cfg.yaml", {"data.stream=sometimes"}),
                       doctest::Contains("data.stream"), fno::ConfigError);
}
