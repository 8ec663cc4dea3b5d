#include "window_stream.h"

#include <fno_data/benchmark_stream.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <optional>

namespace fno::detail {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// A batch read: its windows where batch() hands them, and on a GPU the event
// after their copies (on the side stream).
struct WindowStream::Ready {
  torch::Tensor x, y;
  std::shared_ptr<at::cuda::CUDAEvent> copied;
};

struct WindowStream::Cuda {
  std::optional<c10::cuda::CUDAStream> copies;  // the side stream of the copies to the GPU
};

WindowStream::WindowStream(std::shared_ptr<const data::BenchmarkSet> set, EpochBatches batches,
                           int64_t last_epoch, torch::Device device)
    : set_(std::move(set)),
      batches_(std::move(batches)),
      last_epoch_(last_epoch),
      device_(device),
      cuda_(std::make_unique<Cuda>()) {
  if (device_.is_cuda()) {
    cuda_->copies = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
  }
}

WindowStream::~WindowStream() = default;

const std::vector<torch::Tensor>& WindowStream::batches_of(int64_t epoch) {
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) it = epochs_.emplace(epoch, batches_(epoch)).first;
  return it->second;
}

const std::vector<torch::Tensor>& WindowStream::epoch(int64_t epoch) { return batches_of(epoch); }

std::pair<int64_t, int64_t> WindowStream::after(int64_t epoch, int64_t b) {
  if (b + 1 < static_cast<int64_t>(batches_of(epoch).size())) return {epoch, b + 1};
  if (epoch < last_epoch_) return {epoch + 1, 0};
  return {epoch, -1};
}

WindowStream::Ahead WindowStream::read_ahead(int64_t epoch, int64_t b) {
  const auto index = batches_of(epoch)[static_cast<size_t>(b)].to(torch::kLong).contiguous();
  std::vector<int64_t> windows(index.data_ptr<int64_t>(),
                               index.data_ptr<int64_t>() + index.numel());
  auto promise = std::make_shared<std::promise<std::shared_ptr<Ready>>>();
  Ahead a{epoch, b, promise->get_future().share()};
  worker_.submit([this, promise, windows = std::move(windows)] {
    const auto t0 = Clock::now();
    try {
      auto ready = std::make_shared<Ready>();
      const auto [xs, ys] = data::window_shapes(*set_, static_cast<int64_t>(windows.size()));
      const bool gpu = device_.is_cuda();
      const auto host = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(gpu);
      auto x = torch::empty(xs, host), y = torch::empty(ys, host);
      data::read_windows_into(*set_, windows, x, y);
      if (gpu) {
        // Copies from pinned memory on the side stream; the host blocks stay
        // reserved until they are done (the caching host allocator's events).
        const c10::cuda::CUDAStreamGuard on_copies(*cuda_->copies);
        ready->x = x.to(device_, /*non_blocking=*/true);
        ready->y = y.to(device_, /*non_blocking=*/true);
        ready->copied = std::make_shared<at::cuda::CUDAEvent>();
        ready->copied->record(*cuda_->copies);
      } else {
        ready->x = std::move(x);
        ready->y = std::move(y);
      }
      read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      promise->set_value(std::move(ready));
    } catch (...) {
      read_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      promise->set_exception(std::current_exception());
      throw;  // the worker keeps it too
    }
  });
  return a;
}

std::pair<torch::Tensor, torch::Tensor> WindowStream::batch(int64_t epoch, int64_t b) {
  const auto t0 = Clock::now();
  for (auto it = epochs_.begin(); it != epochs_.end();) {
    it = it->first < epoch ? epochs_.erase(it) : std::next(it);
  }
  Ahead current;
  if (!ahead_.empty() && ahead_.front().epoch == epoch && ahead_.front().b == b) {
    current = std::move(ahead_.front());
    ahead_.pop_front();
  } else {  // not the batch read ahead (a resumed epoch): start over from it
    ahead_.clear();
    current = read_ahead(epoch, b);
  }
  const auto ready = current.ready.get();  // rethrows the read's error
  wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  // The next two batches: one read while this one trains, one queued behind it
  // (asked for after the wait, so that the worker's queue has room).
  auto next = ahead_.empty() ? after(epoch, b) : after(ahead_.back().epoch, ahead_.back().b);
  while (ahead_.size() < 2 && next.second >= 0) {
    ahead_.push_back(read_ahead(next.first, next.second));
    next = after(next.first, next.second);
  }
  if (ready->copied) {
    const auto stream = c10::cuda::getCurrentCUDAStream(device_.index());
    ready->copied->block(stream);
    // Allocated on the side stream, used on this one: not reused before it is done.
    for (const auto* t : {&ready->x, &ready->y}) {
      c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), stream);
    }
  }
  return {ready->x, ready->y};
}

std::pair<double, double> WindowStream::take_times() {
  const std::pair<double, double> t{wait_s_, static_cast<double>(read_ns_.exchange(0)) * 1e-9};
  wait_s_ = 0;
  return t;
}

}  // namespace fno::detail
