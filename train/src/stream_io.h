// A streamed prediction's file work beside its GPU work: while the device
// computes one tile, one worker thread reads the input's next tile (from the
// file, or from the copy of the input kept in host memory) into pinned memory,
// and writes the output's tiles (copied off the device asynchronously) into
// the output file. Every call into HDF5 of the stream runs on that one thread,
// in order, so the library needs no thread safety of its own.
//
//   StreamIo io(read_rows, write_rows, grid_rows, device);
//   source.rows = [&](int64_t r0, int64_t n) { return io.rows(r0, n).to(device, true); };
//   sink = [&](int64_t r0, const at::Tensor& t) { io.put(r0, t); };
//   step->forward(source, sink);
//   io.finish();  // every tile on disk; rethrows the first error
#pragma once

#include <fno_train/background_writer.h>

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>

namespace fno::detail {

/// Seconds of a streamed prediction's file work: on the worker thread
/// (reading the input, writing the output), and the compute thread's waits
/// for it (the part that did not overlap the GPU's work).
struct StreamTimes {
  double read_s = 0, write_s = 0;            // the worker's time at each
  double read_wait_s = 0, write_wait_s = 0;  // the compute thread's waits
  StreamTimes& operator+=(const StreamTimes& o);
};

class StreamIo {
 public:
  /// Rows [r0, r0 + n) of the input, [B, C, n, *S'] on the host.
  using ReadRows = std::function<at::Tensor(int64_t r0, int64_t n)>;
  /// Writes rows [r0, r0 + n) of the output from a host tensor.
  using WriteRows = std::function<void(int64_t r0, const at::Tensor& rows)>;

  /// `grid_rows`: the first spatial dim's size (a sweep's tiles cover it in
  /// order, and the next sweep starts again at row 0). `pinned`: the input's
  /// tiles come in pinned host memory (for asynchronous copies to a GPU).
  StreamIo(ReadRows read, WriteRows write, int64_t grid_rows, bool pinned);
  ~StreamIo();
  StreamIo(const StreamIo&) = delete;
  StreamIo& operator=(const StreamIo&) = delete;

  /// Input rows [r0, r0 + n) on the host (read ahead when the tiles come in
  /// order); asks for the tile after it at once.
  at::Tensor rows(int64_t r0, int64_t n);
  /// Output rows from `tile` (any device): copied to the host without
  /// blocking the compute thread, written by the worker.
  // tile: [B, C, n, *S'] with n rows from r0
  void put(int64_t r0, const at::Tensor& tile);
  /// Waits until every tile put is written; rethrows the first error of the
  /// worker. The read-ahead of a tile nobody asks for is dropped.
  void finish();
  StreamTimes times() const;

 private:
  struct Ahead {
    int64_t r0 = -1, n = 0;
    std::shared_future<at::Tensor> tile;
  };
  Ahead read_ahead(int64_t r0, int64_t n);

  ReadRows read_;
  WriteRows write_;
  int64_t grid_rows_;
  bool pinned_;
  int64_t tile_rows_ = 0;  // the largest tile asked for (the next sweep's)
  Ahead next_;
  std::atomic<int64_t> read_ns_{0}, write_ns_{0};
  double read_wait_s_ = 0, write_wait_s_ = 0;
  BackgroundWriter worker_;  // last: joined before the rest goes
};

}  // namespace fno::detail
