// Internal to train/: the training split of a benchmark data set streamed from
// its files (data.stream; docs/data.md, "Benchmark formats"). Each batch's
// windows are read by hyperslab (fno_data/benchmark_stream.h: windows of one
// trajectory that overlap share a read) on one I/O thread (a BackgroundWriter,
// as StreamIo's reads: every HDF5 call of the stream on that thread, in
// order), which reads the next batches ahead of the one training: one in
// flight and one queued behind it, across the end of an epoch into the next
// (the epochs' orders are known in advance). On a GPU the windows go to pinned
// host memory and on to the device by an asynchronous copy on a side stream;
// the training stream waits for that copy alone. The batches are those of the
// resident path (the same EpochBatches), so both train alike.
//
//   WindowStream ws(set, [&](int64_t e) { return data::epoch_batches(...); }, epochs, device);
//   for (b ...) auto [x, y] = ws.batch(epoch, b);  // raw windows on the device
#pragma once

#include <fno/serialize.h>
#include <fno_data/benchmark.h>
#include <fno_train/background_writer.h>

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace fno::detail {

class WindowStream {
 public:
  /// An epoch's batches: index tensors (int64, on the CPU) into the split's
  /// windows, as data::epoch_batches gives them.
  using EpochBatches = std::function<std::vector<torch::Tensor>(int64_t epoch)>;

  /// `last_epoch`: nothing of a later epoch is read ahead. `device`: where
  /// batch() hands the windows (CPU or CUDA).
  WindowStream(std::shared_ptr<const data::BenchmarkSet> set, EpochBatches batches,
               int64_t last_epoch, torch::Device device);
  ~WindowStream();
  WindowStream(const WindowStream&) = delete;
  WindowStream& operator=(const WindowStream&) = delete;

  const data::BenchmarkSet& set() const { return *set_; }
  /// The epoch's batches (EpochBatches' answer, kept while the epoch trains).
  const std::vector<torch::Tensor>& epoch(int64_t epoch);
  /// Batch b of `epoch`, raw (not normalized), on the device, ready for use on
  /// the current stream; asks for the batches after it.
  // -> x: [B, C_in, *S], y: [B, C_out, *S]
  std::pair<torch::Tensor, torch::Tensor> batch(int64_t epoch, int64_t b);
  /// Seconds batch() waited for reads not done yet since the last call, and
  /// seconds the I/O thread spent reading (both reset).
  std::pair<double, double> take_times();

 private:
  struct Ready;
  struct Ahead {
    int64_t epoch = 0, b = -1;
    std::shared_future<std::shared_ptr<Ready>> ready;
  };
  // The batch after (epoch, b) in training order; b -1 when there is none.
  std::pair<int64_t, int64_t> after(int64_t epoch, int64_t b);
  const std::vector<torch::Tensor>& batches_of(int64_t epoch);
  Ahead read_ahead(int64_t epoch, int64_t b);

  struct Cuda;

  std::shared_ptr<const data::BenchmarkSet> set_;
  EpochBatches batches_;
  int64_t last_epoch_;
  torch::Device device_;
  std::unique_ptr<Cuda> cuda_;
  std::map<int64_t, std::vector<torch::Tensor>> epochs_;  // this epoch's and the next's
  std::deque<Ahead> ahead_;
  double wait_s_ = 0;
  std::atomic<int64_t> read_ns_{0};
  BackgroundWriter worker_;  // last: joined before the rest goes
};

}  // namespace fno::detail
