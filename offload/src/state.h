// Internal: the offloader's state, shared by offloader.cpp (the saved-tensor
// hooks) and host_tiles.cpp (tiles streamed through the same copy engine).
#pragma once

#include <fno_offload/offload.h>

#include "copy_engine.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fno::offload {

namespace detail {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Entry {
  enum class Where { kCopyingOut, kOnHost, kCopyingIn, kOnDevice };
  c10::weak_intrusive_ptr<c10::StorageImpl> key;  // pins the address the dedup map uses
  c10::Storage device;  // the original until released, or the reloaded copy
  c10::Device device_id{c10::kCPU};
  void* host = nullptr;
  int64_t bytes = 0;       // on the device
  int64_t link_bytes = 0;  // over the link and on the host (half of bytes when compressed)
  int64_t index = 0;       // pack order within the step
  int64_t stage = 0;       // the stage of the scope that first saved it
  Where where = Where::kCopyingOut;
  std::shared_ptr<detail::Ticket> out, in;
  int refs = 0;
  bool compressed = false;  // stored on the host as bfloat16
  bool hold = false;        // saved again by the last scope of forward: keep the GPU copy
  bool consumed = false;    // unpacked at least once
  bool prefetched = false;  // brought back ahead of need
  explicit Entry(c10::Storage s) : key(s.getWeakStorageImpl()), device(std::move(s)) {}
};

}  // namespace detail

using detail::Clock;
using detail::Entry;
using detail::ms_since;

struct Offloader::State {
  explicit State(OffloadOptions o) : options(std::move(o)), window(options.max_inflight_bytes()) {
    record_timeline = options.record_timeline();
    if (options.simulate_on_cpu()) {
      engine = detail::make_host_copy_engine(options);
    } else {
      engine = detail::make_cuda_copy_engine(options);
    }
  }
  ~State() { stop_sampler(); }

  OffloadOptions options;
  int64_t window;                              // back-pressure window (bytes in flight)
  std::unique_ptr<detail::CopyEngine> engine;  // null: inactive
  std::mutex mu;

  std::unordered_set<const c10::StorageImpl*> excluded;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> excluded_pins;

  std::unordered_map<const c10::StorageImpl*, std::weak_ptr<Entry>> by_storage;
  std::vector<std::weak_ptr<Entry>> order;  // this step's entries, pack order
  std::deque<std::shared_ptr<Entry>> copying_out;
  int64_t inflight_bytes = 0;
  int64_t unconsumed_prefetch_bytes = 0;
  int64_t cursor = -1;         // next entry (downwards) the prefetcher looks at
  int64_t backward_stage = 0;  // lowest stage unpacked so far in this backward
  int64_t live_entries = 0;
  bool in_backward = false;

  Level level = Level::kKeep;
  int64_t stage = 0;        // numbers the stages of forward (chunks share one)
  bool hold_scope = false;  // the current scope is the last of forward
  int guards = 0;
  bool warned_degraded = false;

  StepStats stats;
  Clock::time_point step_start = Clock::now();
  std::atomic<int> phase{0};  // 0 idle, 1 forward, 2 backward
  std::mutex timeline_mu;
  std::vector<MemorySample> timeline;
  std::thread sampler;
  std::atomic<bool> sampling{false};

  // ----- pack / unpack -----------------------------------------------------
  std::shared_ptr<Entry> pack(const at::Tensor& t, bool* keep);
  c10::Storage unpack(Entry& e);
  void release(const std::shared_ptr<Entry>& e);
  void poll_locked();
  void prefetch_locked();
  void fetch_locked(Entry& e, bool ahead);
  void enter_backward_locked(int64_t at_stage);

  // ----- timeline -----------------------------------------------------------
  std::atomic<bool> record_timeline{false};
  void mark(const std::string& event) {
    if (!record_timeline.load() || !sampling.load()) return;
    sample(event);
  }
  void sample(const std::string& event) {
    const auto a = detail::allocator_stats();
    static const char* kPhase[] = {"idle", "forward", "backward"};
    std::lock_guard<std::mutex> lock(timeline_mu);
    timeline.push_back(
        {ms_since(step_start), a.allocated, a.reserved, kPhase[phase.load()], event});
  }
  void start_sampler() {
    if (!record_timeline.load() || !detail::cuda_available() || sampling.load()) return;
    sampling = true;
    sampler = std::thread([this] {
      while (sampling.load()) {
        sample("");
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }
  void stop_sampler() {
    if (sampling.exchange(false) && sampler.joinable()) sampler.join();
  }
};

}  // namespace fno::offload
