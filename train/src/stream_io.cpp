#include "stream_io.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace fno::detail {

namespace {

using Clock = std::chrono::steady_clock;

int64_t since_ns(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

double since_s(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

StreamTimes& StreamTimes::operator+=(const StreamTimes& o) {
  read_s += o.read_s;
  write_s += o.write_s;
  read_wait_s += o.read_wait_s;
  write_wait_s += o.write_wait_s;
  return *this;
}

StreamIo::StreamIo(ReadRows read, WriteRows write, int64_t grid_rows, bool pinned)
    : read_(std::move(read)), write_(std::move(write)), grid_rows_(grid_rows), pinned_(pinned) {}

StreamIo::~StreamIo() = default;

StreamIo::Ahead StreamIo::read_ahead(int64_t r0, int64_t n) {
  auto promise = std::make_shared<std::promise<at::Tensor>>();
  Ahead a{r0, n, promise->get_future().share()};
  worker_.submit([this, promise, r0, n] {
    const auto t0 = Clock::now();
    try {
      auto tile = read_(r0, n);
      if (pinned_ && !tile.is_pinned()) {
        auto host = at::empty(tile.sizes(), tile.options().pinned_memory(true));
        host.copy_(tile);
        tile = host;
      }
      read_ns_ += since_ns(t0);
      promise->set_value(std::move(tile));
    } catch (...) {
      read_ns_ += since_ns(t0);
      promise->set_exception(std::current_exception());
      throw;  // the worker keeps it too: later puts and finish() fail at once
    }
  });
  return a;
}

at::Tensor StreamIo::rows(int64_t r0, int64_t n) {
  const auto t0 = Clock::now();
  Ahead current = next_.r0 == r0 && next_.n == n ? std::move(next_) : read_ahead(r0, n);
  next_ = Ahead{};
  tile_rows_ = std::max(tile_rows_, n);
  // The tile after this one: the next in this sweep, or the first of the next.
  const int64_t r1 = r0 + n < grid_rows_ ? r0 + n : 0;
  next_ = read_ahead(r1, std::min(tile_rows_, grid_rows_ - r1));
  auto tile = current.tile.get();
  read_wait_s_ += since_s(t0);
  return tile;
}

void StreamIo::put(int64_t r0, const at::Tensor& tile) {
  const auto t0 = Clock::now();
  // An asynchronous copy into pinned memory, ordered on the current stream;
  // the worker waits for it, then writes.
  TensorDict d;
  d.insert("tile", tile);
  auto snap = std::make_shared<TensorSnapshot>(snapshot_tensors(d));
  worker_.submit([this, snap, r0] {
    const auto t1 = Clock::now();
    snap->wait();
    write_(r0, snap->tensors["tile"]);
    write_ns_ += since_ns(t1);
  });
  write_wait_s_ += since_s(t0);
}

void StreamIo::finish() {
  const auto t0 = Clock::now();
  next_ = Ahead{};
  worker_.wait();
  write_wait_s_ += since_s(t0);
}

StreamTimes StreamIo::times() const {
  StreamTimes t;
  t.read_s = static_cast<double>(read_ns_.load()) * 1e-9;
  t.write_s = static_cast<double>(write_ns_.load()) * 1e-9;
  t.read_wait_s = read_wait_s_;
  t.write_wait_s = write_wait_s_;
  return t;
}

}  // namespace fno::detail
