// A streamed prediction's file work beside its compute (train/src/stream_io.h):
// the input's tiles come back in order, sweep after sweep, read ahead on the
// I/O thread; the output's tiles reach the writer with their values, in
// order, from that same thread; a failed read or write reaches the caller as
// its own error, once, and nothing hangs.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../train/src/stream_io.h"

using fno::detail::StreamIo;

namespace {

// A [1, 2, 10, 3] input whose value at row r is r (plus 100 in channel 1).
torch::Tensor rows_of(int64_t r0, int64_t n) {
  auto r = torch::arange(r0, r0 + n, torch::kFloat).view({1, 1, n, 1}).expand({1, 1, n, 3});
  return torch::cat({r, r + 100}, 1).contiguous();
}

}  // namespace

TEST_CASE("StreamIo: tiles in order over three sweeps, read ahead off the compute thread") {
  const int64_t grid = 10, tile = 4;  // tiles of 4, 4, 2 rows
  std::mutex mu;
  std::vector<int64_t> reads;
  std::vector<std::thread::id> io_threads;
  std::vector<std::pair<int64_t, torch::Tensor>> written;
  StreamIo io(
      [&](int64_t r0, int64_t n) {
        std::lock_guard<std::mutex> lock(mu);
        reads.push_back(r0);
        io_threads.push_back(std::this_thread::get_id());
        return rows_of(r0, n);
      },
      [&](int64_t r0, const at::Tensor& t) {
        std::lock_guard<std::mutex> lock(mu);
        io_threads.push_back(std::this_thread::get_id());
        written.emplace_back(r0, t.clone());
      },
      grid, /*pinned=*/false);
  for (int sweep = 0; sweep < 3; ++sweep) {
    for (int64_t r0 = 0; r0 < grid; r0 += tile) {
      const int64_t n = std::min(tile, grid - r0);
      const auto t = io.rows(r0, n);
      CHECK(torch::equal(t, rows_of(r0, n)));
      if (sweep == 2) io.put(r0, t * 2);
    }
  }
  io.finish();
  // Each tile read once a sweep (the last read-ahead, of row 0, may come too).
  REQUIRE(reads.size() >= 9);
  const std::vector<int64_t> order{0, 4, 8, 0, 4, 8, 0, 4, 8};
  CHECK(std::vector<int64_t>(reads.begin(), reads.begin() + 9) == order);
  CHECK(reads.size() <= 10);
  REQUIRE(written.size() == 3);
  for (size_t i = 0; i < written.size(); ++i) {
    const int64_t r0 = static_cast<int64_t>(i) * tile;
    CHECK(written[i].first == r0);
    CHECK(torch::equal(written[i].second, rows_of(r0, std::min(tile, grid - r0)) * 2));
  }
  for (const auto& id : io_threads) CHECK(id != std::this_thread::get_id());
  const auto times = io.times();
  CHECK(times.read_s >= 0);
  CHECK(times.write_s >= 0);
}

TEST_CASE("StreamIo: a failed read reaches the compute thread as its own error") {
  StreamIo io(
      [](int64_t r0, int64_t n) {
        if (r0 >= 4) throw std::runtime_error("in.h5: read failed at row " + std::to_string(r0));
        return rows_of(r0, n);
      },
      [](int64_t, const at::Tensor&) {}, 10, false);
  CHECK(torch::equal(io.rows(0, 4), rows_of(0, 4)));
  CHECK_THROWS_WITH(io.rows(4, 4), "in.h5: read failed at row 4");
}

TEST_CASE("StreamIo: a failed write is the error of finish(), or of the next call") {
  StreamIo io([](int64_t r0, int64_t n) { return rows_of(r0, n); },
              [](int64_t r0, const at::Tensor&) {
                if (r0 == 4) throw std::runtime_error("out.h5: No space left on device");
              },
              10, false);
  bool thrown = false;
  try {
    for (int64_t r0 = 0; r0 < 10; r0 += 4) io.put(r0, rows_of(r0, std::min<int64_t>(4, 10 - r0)));
    io.finish();
  } catch (const std::runtime_error& e) {
    thrown = true;
    CHECK(std::string(e.what()) == "out.h5: No space left on device");
  }
  CHECK(thrown);
}
