// CudaCopyEngine: device <-> pinned host copies on two dedicated streams.
//
// Ordering, without any device-wide synchronization:
//   out: compute --ready--> d2h stream: copy, end.  The source (or, compressed,
//        the bfloat16 staging made on the compute stream) is recorded on the
//        d2h stream, so the allocator never reuses it before the copy is done,
//        however early the offloader lets go of it.
//   in:  the destination is allocated for the h2d stream itself (the caching
//        allocator keeps one pool per stream), so the copy waits for nothing
//        but earlier copies (and, for an entry still on its way out, that
//        copy's `end`): a prefetch starts as soon as the link is free, not
//        when the compute issued before it is done. A compressed reload widens
//        on the h2d stream too. The consumer's stream waits on `end`, and
//        record_use() (recordStream) keeps the memory from going back to the
//        h2d pool before that stream's use is done.
// The pinned pool is an arena of large cudaHostAlloc slabs (cudaHostAlloc costs
// ~0.6 s/GiB, so it is paid once), reset when a step's tensors are all released.
#include "copy_engine.h"

#include <ATen/ATen.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

namespace fno::offload::detail {
namespace {

constexpr int64_t kAlign = 512;

// Reused events: timing ones for copies and stalls, plain ones for ordering.
class EventPool {
 public:
  ~EventPool() {
    for (auto e : timing_) cudaEventDestroy(e);
    for (auto e : plain_) cudaEventDestroy(e);
  }
  cudaEvent_t get(bool timing) {
    auto& pool = timing ? timing_ : plain_;
    if (!pool.empty()) {
      auto e = pool.back();
      pool.pop_back();
      return e;
    }
    cudaEvent_t e;
    C10_CUDA_CHECK(
        cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    return e;
  }
  void put(cudaEvent_t e, bool timing) { (timing ? timing_ : plain_).push_back(e); }

 private:
  std::vector<cudaEvent_t> timing_, plain_;
};

class CudaTicket;

struct StepRecord {
  std::vector<std::shared_ptr<CudaTicket>> copies;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> stalls;          // backward, on reloads
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> forward_stalls;  // around host waits
  cudaEvent_t wait_begins = nullptr;
};

class CudaTicket final : public Ticket {
 public:
  CudaTicket(int64_t bytes, bool to_host, cudaEvent_t start, cudaEvent_t end, StepRecord* step)
      : bytes_(bytes), to_host_(to_host), start_(start), end_(end), step_(step) {}

  bool done() override {
    if (end_ == nullptr) return true;
    const auto status = cudaEventQuery(end_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    C10_CUDA_CHECK(status);
    return true;
  }
  void host_wait() override {
    if (end_ != nullptr) C10_CUDA_CHECK(cudaEventSynchronize(end_));
  }
  void stream_wait() override {
    if (end_ == nullptr) return;
    const auto stream = c10::cuda::getCurrentCUDAStream().stream();
    if (stall_measured_ || pool_ == nullptr) {
      C10_CUDA_CHECK(cudaStreamWaitEvent(stream, end_, 0));
      return;
    }
    // The compute stream's stall: from when its earlier work is done to when
    // the copy is.
    auto before = pool_->get(true);
    auto after = pool_->get(true);
    C10_CUDA_CHECK(cudaEventRecord(before, stream));
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream, end_, 0));
    C10_CUDA_CHECK(cudaEventRecord(after, stream));
    step_->stalls.emplace_back(before, after);
    stall_measured_ = true;
  }

  int64_t bytes_;
  bool to_host_;
  cudaEvent_t start_, end_;
  StepRecord* step_;
  EventPool* pool_ = nullptr;
  bool stall_measured_ = false;
};

class CudaCopyEngine final : public CopyEngine {
 public:
  explicit CudaCopyEngine(const OffloadOptions& options)
      : slab_bytes_(options.slab_bytes()), limit_(options.host_memory_limit()) {}

  ~CudaCopyEngine() override {
    try {
      StepStats ignored;
      collect(ignored);
    } catch (...) {
    }
    for (auto& s : slabs_) cudaFreeHost(s.ptr);
  }

  std::string name() const override { return "cuda (pinned slab pool, d2h and h2d copy streams)"; }
  bool accepts(const c10::Device& device) const override { return device.is_cuda(); }

  void* host_alloc(int64_t bytes) override {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    for (; current_ < slabs_.size(); ++current_) {
      auto& s = slabs_[current_];
      if (s.size - s.used >= bytes) {
        void* p = static_cast<char*>(s.ptr) + s.used;
        s.used += bytes;
        return p;
      }
    }
    if (exhausted_) return nullptr;
    int64_t size = std::max(bytes, slab_bytes_);
    if (limit_ > 0) {
      if (capacity_ + bytes > limit_) return nullptr;
      size = std::min(size, limit_ - capacity_);
    }
    void* p = nullptr;
    if (cudaHostAlloc(&p, static_cast<size_t>(size), cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      exhausted_ = true;  // until the next step: do not retry for every tensor
      return nullptr;
    }
    slabs_.push_back({p, size, bytes});
    current_ = slabs_.size() - 1;
    capacity_ += size;
    return p;
  }

  void* host_alloc_persistent(int64_t bytes) override {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    if (limit_ > 0 && capacity_ + bytes > limit_) return nullptr;
    void* p = nullptr;
    if (cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    capacity_ += bytes;
    return p;
  }
  void host_free(void* ptr, int64_t bytes) override {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    // Copies of this step may still read or write it.
    for (auto& t : step_.copies) {
      if (t->end_ != nullptr) C10_CUDA_CHECK(cudaEventSynchronize(t->end_));
    }
    C10_CUDA_CHECK(cudaFreeHost(ptr));
    capacity_ -= bytes;
  }

  void host_reset() override {
    for (auto& s : slabs_) s.used = 0;
    current_ = 0;
    exhausted_ = false;
    // The next step's device->host copies must not overwrite memory that a
    // host->device copy of this step is still reading.
    if (streams_ && last_in_ != nullptr) {
      C10_CUDA_CHECK(cudaStreamWaitEvent(streams_->d2h.stream(), last_in_, 0));
    }
  }
  int64_t host_capacity() const override { return capacity_; }

  std::shared_ptr<Ticket> copy_out(const c10::Storage& src, void* dst, int64_t bytes, bool compress,
                                   const Ticket* after) override {
    const auto device = src.device();
    c10::cuda::CUDAGuard guard(device);
    auto& s = streams(device);
    if (const auto* in = dynamic_cast<const CudaTicket*>(after); in && in->end_ != nullptr) {
      // A reload still reads dst: overwrite it only after.
      C10_CUDA_CHECK(cudaStreamWaitEvent(s.d2h.stream(), in->end_, 0));
    }
    const auto compute = c10::cuda::getCurrentCUDAStream(device.index()).stream();
    c10::Storage staging;
    const void* from = src.data();
    if (compress) {
      // Rounded on the compute stream, after the work that wrote src.
      staging = float_view(src, bytes).to(at::kBFloat16).storage();
      from = staging.data();
      bytes /= 2;
    }
    auto ready = events_.get(false);
    C10_CUDA_CHECK(cudaEventRecord(ready, compute));
    C10_CUDA_CHECK(cudaStreamWaitEvent(s.d2h.stream(), ready, 0));
    events_.put(ready, false);  // re-recording a waited-on event is safe
    auto ticket = start_copy(bytes, true, s.d2h.stream());
    C10_CUDA_CHECK(cudaMemcpyAsync(dst, from, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                   s.d2h.stream()));
    C10_CUDA_CHECK(cudaEventRecord(ticket->end_, s.d2h.stream()));
    // The allocator holds what the copy reads until the copy is done, so the
    // offloader may drop it at any time without waiting.
    c10::cuda::CUDACachingAllocator::recordStream(compress ? staging.data_ptr() : src.data_ptr(),
                                                  s.d2h);
    ticket->staging = std::move(staging);
    return ticket;
  }

  c10::Storage copy_in(const void* src, int64_t bytes, c10::Device device, bool compressed,
                       const Ticket* after, std::shared_ptr<Ticket>* ticket_out) override {
    c10::cuda::CUDAGuard guard(device);
    auto& s = streams(device);
    if (const auto* out = dynamic_cast<const CudaTicket*>(after); out && out->end_ != nullptr) {
      // The host copy is still being written: read it only after.
      C10_CUDA_CHECK(cudaStreamWaitEvent(s.h2d.stream(), out->end_, 0));
    }
    // Allocations below belong to the h2d stream's pool: nothing on the compute
    // stream can still be using them, so the copy need not wait for it.
    c10::cuda::CUDAStreamGuard on_h2d(s.h2d);
    auto* allocator = c10::cuda::CUDACachingAllocator::get();
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, allocator->allocate(bytes),
                         allocator, /*resizable=*/false);
    const int64_t link_bytes = compressed ? bytes / 2 : bytes;
    auto ticket = start_copy(link_bytes, false, s.h2d.stream());
    if (compressed) {
      auto half = at::empty({bytes / 4}, at::TensorOptions().dtype(at::kBFloat16).device(device));
      C10_CUDA_CHECK(cudaMemcpyAsync(half.data_ptr(), src, static_cast<size_t>(link_bytes),
                                     cudaMemcpyHostToDevice, s.h2d.stream()));
      float_view(storage, bytes).copy_(half);  // widened on the h2d stream
    } else {
      C10_CUDA_CHECK(cudaMemcpyAsync(storage.mutable_data(), src, static_cast<size_t>(bytes),
                                     cudaMemcpyHostToDevice, s.h2d.stream()));
    }
    C10_CUDA_CHECK(cudaEventRecord(ticket->end_, s.h2d.stream()));
    last_in_ = ticket->end_;
    *ticket_out = ticket;
    return storage;
  }

  void host_wait_begins(const c10::Device& device) override {
    if (step_.wait_begins != nullptr) return;
    step_.wait_begins = events_.get(true);
    C10_CUDA_CHECK(
        cudaEventRecord(step_.wait_begins, c10::cuda::getCurrentCUDAStream(device.index())));
  }
  void host_wait_ends(const c10::Device& device) override {
    if (step_.wait_begins == nullptr) return;
    // Completes right after wait_begins while the stream still had work queued
    // when the host resumed; otherwise when the host issued it: the gap is idle.
    auto ends = events_.get(true);
    C10_CUDA_CHECK(cudaEventRecord(ends, c10::cuda::getCurrentCUDAStream(device.index())));
    step_.forward_stalls.emplace_back(step_.wait_begins, ends);
    step_.wait_begins = nullptr;
  }

  void record_use(const c10::Storage& storage) override {
    c10::cuda::CUDACachingAllocator::recordStream(
        storage.data_ptr(), c10::cuda::getCurrentCUDAStream(storage.device().index()));
  }

  void collect(StepStats& stats) override {
    // Each copy's interval, from the first copy's start, for the overlap of
    // the two directions (the link is full duplex: both may be busy at once).
    std::vector<std::pair<double, double>> spans[2];  // [to_host]
    cudaEvent_t origin = step_.copies.empty() ? nullptr : step_.copies.front()->start_;
    for (auto& t : step_.copies) {
      C10_CUDA_CHECK(cudaEventSynchronize(t->end_));
      float ms = 0, begin = 0;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, t->start_, t->end_));
      C10_CUDA_CHECK(cudaEventElapsedTime(&begin, origin, t->start_));
      (t->to_host_ ? stats.d2h_seconds : stats.h2d_seconds) += ms / 1e3;
      spans[t->to_host_ ? 1 : 0].emplace_back(begin, begin + ms);
    }
    stats.link_overlap_ms += overlap_ms(spans[0], spans[1]);
    for (auto& t : step_.copies) {
      events_.put(t->start_, true);
      events_.put(t->end_, true);
      t->start_ = t->end_ = nullptr;
    }
    if (!step_.copies.empty() && streams_) {
      // The calibration's copies may land on a slower NUMA node than the
      // step's: a direction's peak is the best rate ever seen, either way.
      auto [d2h, h2d] = peak_gbps();
      for (int dir = 0; dir < 2; ++dir) {
        double bytes = 0, seconds = dir == 1 ? stats.d2h_seconds : stats.h2d_seconds;
        for (auto& t : step_.copies) {
          if (t->to_host_ == (dir == 1)) bytes += static_cast<double>(t->bytes_);
        }
        if (seconds > 0) (dir == 1 ? d2h : h2d) = std::max(dir == 1 ? d2h : h2d, bytes / seconds / 1e9);
      }
      peak_ = {d2h, h2d};
      stats.d2h_peak_gbps = d2h;
      stats.h2d_peak_gbps = h2d;
    }
    // The compute stream's stalls: the time between each pair of events.
    const auto add_gaps = [this](std::vector<std::pair<cudaEvent_t, cudaEvent_t>>& pairs,
                                 double& total_ms) {
      for (auto& [before, after] : pairs) {
        C10_CUDA_CHECK(cudaEventSynchronize(after));
        float ms = 0;
        C10_CUDA_CHECK(cudaEventElapsedTime(&ms, before, after));
        total_ms += ms;
        events_.put(before, true);
        events_.put(after, true);
      }
      pairs.clear();
    };
    add_gaps(step_.stalls, stats.backward_wait_ms);
    add_gaps(step_.forward_stalls, stats.forward_stall_ms);
    if (step_.wait_begins != nullptr) {
      events_.put(step_.wait_begins, true);
      step_.wait_begins = nullptr;
    }
    step_.copies.clear();
    last_in_ = nullptr;
  }

 private:
  struct Slab {
    void* ptr;
    int64_t size;
    int64_t used;
  };
  struct Streams {
    c10::cuda::CUDAStream d2h, h2d;
    c10::DeviceIndex device;
  };

  Streams& streams(const c10::Device& device) {
    if (!streams_) {
      streams_.emplace(Streams{c10::cuda::getStreamFromPool(false, device.index()),
                               c10::cuda::getStreamFromPool(false, device.index()),
                               device.index()});
    }
    TORCH_CHECK(streams_->device == device.index(), "fno offload: tensors on cuda:", device.index(),
                " but the offloader serves cuda:", streams_->device,
                "; use one Offloader per device");
    return *streams_;
  }

  // The link's best rates (GB/s) device -> host and host -> device: 64 MiB
  // copies on the copy streams, the best of three each, measured once.
  std::pair<double, double> peak_gbps() {
    if (peak_.first > 0) return peak_;
    constexpr int64_t kBytes = int64_t{64} << 20;
    void* host = nullptr;
    if (cudaHostAlloc(&host, kBytes, cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return peak_;
    }
    c10::cuda::CUDAGuard guard(streams_->device);
    const auto device = at::empty(
        {kBytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, streams_->device));
    cudaEvent_t a = events_.get(true), b = events_.get(true);
    const auto best = [&](bool to_host) {
      const auto stream = (to_host ? streams_->d2h : streams_->h2d).stream();
      float least = 0;
      for (int i = 0; i < 3; ++i) {
        C10_CUDA_CHECK(cudaEventRecord(a, stream));
        C10_CUDA_CHECK(cudaMemcpyAsync(
            to_host ? host : device.data_ptr(), to_host ? device.data_ptr() : host, kBytes,
            to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream));
        C10_CUDA_CHECK(cudaEventRecord(b, stream));
        C10_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        C10_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (i == 0 || ms < least) least = ms;
      }
      return least > 0 ? static_cast<double>(kBytes) / (least / 1e3) / 1e9 : 0.0;
    };
    // The buffer is filled on the compute stream; the copy streams wait for it.
    C10_CUDA_CHECK(cudaMemsetAsync(device.data_ptr(), 1, kBytes,
                                   c10::cuda::getCurrentCUDAStream(streams_->device).stream()));
    c10::cuda::device_synchronize();
    peak_ = {best(true), best(false)};
    events_.put(a, true);
    events_.put(b, true);
    C10_CUDA_CHECK(cudaFreeHost(host));
    return peak_;
  }

  // Time covered by both interval lists at once.
  static double overlap_ms(std::vector<std::pair<double, double>> a,
                           std::vector<std::pair<double, double>> b) {
    const auto merge = [](std::vector<std::pair<double, double>>& v) {
      std::sort(v.begin(), v.end());
      std::vector<std::pair<double, double>> out;
      for (const auto& i : v) {
        if (!out.empty() && i.first <= out.back().second) {
          out.back().second = std::max(out.back().second, i.second);
        } else {
          out.push_back(i);
        }
      }
      v = std::move(out);
    };
    merge(a);
    merge(b);
    double total = 0;
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      const double lo = std::max(a[i].first, b[j].first);
      const double hi = std::min(a[i].second, b[j].second);
      if (hi > lo) total += hi - lo;
      (a[i].second < b[j].second ? i : j) += 1;
    }
    return total;
  }

  std::shared_ptr<CudaTicket> start_copy(int64_t bytes, bool to_host, cudaStream_t stream) {
    auto ticket =
        std::make_shared<CudaTicket>(bytes, to_host, events_.get(true), events_.get(true), &step_);
    ticket->pool_ = &events_;
    C10_CUDA_CHECK(cudaEventRecord(ticket->start_, stream));
    step_.copies.push_back(ticket);
    return ticket;
  }

  int64_t slab_bytes_, limit_;
  std::vector<Slab> slabs_;
  size_t current_ = 0;
  int64_t capacity_ = 0;
  bool exhausted_ = false;
  std::optional<Streams> streams_;
  EventPool events_;
  StepRecord step_;
  cudaEvent_t last_in_ = nullptr;
  std::pair<double, double> peak_{0.0, 0.0};  // GB/s device -> host, host -> device
};

}  // namespace

std::unique_ptr<CopyEngine> make_cuda_copy_engine(const OffloadOptions& options) {
  if (!cuda_available()) return nullptr;
  return std::make_unique<CudaCopyEngine>(options);
}

bool cuda_available() { return c10::cuda::device_count() > 0; }

AllocatorStats allocator_stats() {
  AllocatorStats out;
  if (!cuda_available()) return out;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  out.allocated = stats.allocated_bytes[kAll].current;
  out.reserved = stats.reserved_bytes[kAll].current;
  out.peak_allocated = stats.allocated_bytes[kAll].peak;
  out.peak_reserved = stats.reserved_bytes[kAll].peak;
  return out;
}

void reset_peak_stats() {
  if (cuda_available())
    c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
}

void device_synchronize() {
  if (cuda_available()) c10::cuda::device_synchronize();
}

}  // namespace fno::offload::detail

namespace fno::offload {

int64_t device_free_bytes() {
  if (!detail::cuda_available()) return 0;
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const auto a = detail::allocator_stats();
  int64_t bytes = static_cast<int64_t>(free) + (a.reserved - a.allocated);
  // Under a memory fraction (cap_device_memory, or the user's), the allocator
  // gives no more than that share of the device.
  const double fraction =
      c10::cuda::CUDACachingAllocator::getMemoryFraction(c10::cuda::current_device());
  if (fraction > 0 && fraction < 1) {
    const auto capped = static_cast<int64_t>(fraction * static_cast<double>(total)) - a.allocated;
    bytes = std::min(bytes, capped);
  }
  return bytes;
}

int64_t device_total_bytes() {
  if (!detail::cuda_available()) return 0;
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total);
}

double cap_device_memory(int64_t bytes) {
  TORCH_CHECK(detail::cuda_available(), "fno offload: no CUDA device to cap");
  const auto total = device_total_bytes();
  TORCH_CHECK(bytes > 0 && bytes <= total, "fno offload: a memory cap of ", bytes,
              " bytes is outside (0, ", total, "] (the device's memory)");
  const double fraction = static_cast<double>(bytes) / static_cast<double>(total);
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA));  // initializes the allocator
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, c10::cuda::current_device());
  return fraction;
}

}  // namespace fno::offload
