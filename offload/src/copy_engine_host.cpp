// HostCopyEngine: CPU tensors moved into a separate host pool, synchronously.
// It stands in for the GPU in tests, so that deduplication, the parameter
// filter, prefetch order, degradation and gradients are checked on any machine.
#include "copy_engine.h"

#include <fno_offload/planner.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <vector>

namespace fno::offload::detail {

at::Tensor float_view(const c10::Storage& storage, int64_t bytes) {
  return at::empty({0}, at::TensorOptions().dtype(at::kFloat).device(storage.device()))
      .set_(storage, 0, {bytes / 4}, {1});
}

namespace {

class DoneTicket final : public Ticket {
 public:
  bool done() override { return true; }
  void host_wait() override {}
  void stream_wait() override {}
};

class HostCopyEngine final : public CopyEngine {
 public:
  explicit HostCopyEngine(const OffloadOptions& options) : limit_(options.host_memory_limit()) {}

  std::string name() const override { return "host (simulated device: CPU tensors)"; }
  bool accepts(const c10::Device& device) const override { return device.is_cpu(); }

  void* host_alloc(int64_t bytes) override {
    if (limit_ > 0 && used_ + persistent_ + bytes > limit_) return nullptr;
    blocks_.emplace_back(static_cast<size_t>(bytes));
    used_ += bytes;
    return blocks_.back().data();
  }
  void host_reset() override {
    blocks_.clear();
    used_ = 0;
  }
  int64_t host_capacity() const override { return used_ + persistent_; }

  void* host_alloc_persistent(int64_t bytes) override {
    if (limit_ > 0 && used_ + persistent_ + bytes > limit_) return nullptr;
    persistent_ += bytes;
    return ::operator new(static_cast<size_t>(bytes));
  }
  void host_free(void* ptr, int64_t bytes) override {
    ::operator delete(ptr);
    persistent_ -= bytes;
  }

  std::shared_ptr<Ticket> copy_out(const c10::Storage& src, void* dst, int64_t bytes, bool compress,
                                   const Ticket* /*after*/) override {
    if (compress) {
      const auto half = float_view(src, bytes).to(at::kBFloat16);
      std::memcpy(dst, half.data_ptr(), static_cast<size_t>(bytes / 2));
    } else {
      std::memcpy(dst, src.data(), static_cast<size_t>(bytes));
    }
    return std::make_shared<DoneTicket>();
  }
  // Copies here are synchronous: `after` has always completed.
  c10::Storage copy_in(const void* src, int64_t bytes, c10::Device device, bool compressed,
                       const Ticket* /*after*/, std::shared_ptr<Ticket>* ticket) override {
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, c10::GetCPUAllocator(),
                         /*resizable=*/false);
    if (compressed) {
      auto half = at::empty({bytes / 4}, at::TensorOptions().dtype(at::kBFloat16));
      std::memcpy(half.data_ptr(), src, static_cast<size_t>(bytes / 2));
      float_view(storage, bytes).copy_(half);
    } else {
      std::memcpy(storage.mutable_data(), src, static_cast<size_t>(bytes));
    }
    *ticket = std::make_shared<DoneTicket>();
    return storage;
  }
  void host_wait_begins(const c10::Device&) override {}
  void host_wait_ends(const c10::Device&) override {}
  void record_use(const c10::Storage&) override {}
  void collect(StepStats&) override {}

 private:
  int64_t limit_;
  int64_t used_ = 0;
  int64_t persistent_ = 0;
  std::vector<std::vector<char>> blocks_;
};

}  // namespace

std::unique_ptr<CopyEngine> make_host_copy_engine(const OffloadOptions& options) {
  return std::make_unique<HostCopyEngine>(options);
}

#ifndef FNO_OFFLOAD_CUDA
std::unique_ptr<CopyEngine> make_cuda_copy_engine(const OffloadOptions&) { return nullptr; }
bool cuda_available() { return false; }
AllocatorStats allocator_stats() { return {}; }
void reset_peak_stats() {}
void device_synchronize() {}
#endif

}  // namespace fno::offload::detail

#ifndef FNO_OFFLOAD_CUDA
namespace fno::offload {
int64_t device_free_bytes() { return 0; }
int64_t device_total_bytes() { return 0; }
double cap_device_memory(int64_t) { TORCH_CHECK(false, "fno offload: built without CUDA"); }
}  // namespace fno::offload
#endif
