// Internal: the copies behind the offloader, and the allocator statistics.
// CudaCopyEngine (copy_engine_cuda.cpp) moves CUDA tensors over two copy
// streams into a pinned slab pool; HostCopyEngine moves CPU tensors into a
// separate host pool synchronously, so that every code path above it can be
// tested without a GPU.
#pragma once

#include <fno_offload/offload.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <memory>
#include <string>

namespace fno::offload::detail {

/// One asynchronous copy.
class Ticket {
 public:
  virtual ~Ticket() = default;
  /// The copy has completed (never blocks).
  virtual bool done() = 0;
  /// Blocks the calling host thread until the copy has completed.
  virtual void host_wait() = 0;
  /// Makes the current stream wait for the copy (no host block); records the stall.
  virtual void stream_wait() = 0;
  /// A device buffer the copy reads (a compressed copy's bfloat16 staging):
  /// the offloader drops it once done() says the copy has completed.
  c10::Storage staging;
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual std::string name() const = 0;
  /// Tensors on this device are moved.
  virtual bool accepts(const c10::Device& device) const = 0;
  /// Host memory for `bytes`; nullptr when the pool cannot grow (the caller keeps the tensor).
  virtual void* host_alloc(int64_t bytes) = 0;
  /// Every host_alloc of this step has been released: the pool is reused from its start.
  virtual void host_reset() = 0;
  virtual int64_t host_capacity() const = 0;
  /// Host memory of its own for `bytes` (not the step's pool: it lives until
  /// host_free), within the host memory limit; nullptr when there is none.
  virtual void* host_alloc_persistent(int64_t bytes) = 0;
  virtual void host_free(void* ptr, int64_t bytes) = 0;
  /// Copies the `bytes` of `src` to `dst` after the work issued so far on the
  /// current stream. `compress`: src holds float32; dst gets bytes / 2 of
  /// bfloat16, rounded on the current stream first. `after`: a copy that is
  /// still reading `dst` (nullptr: none); this one follows it.
  virtual std::shared_ptr<Ticket> copy_out(const c10::Storage& src, void* dst, int64_t bytes,
                                           bool compress, const Ticket* after = nullptr) = 0;
  /// A new device storage of `bytes`, filled from `src` (bytes / 2 of bfloat16,
  /// widened, when `compressed`). The copy does not wait for the current
  /// stream's work: the storage is allocated for the copy's own stream, and
  /// record_use() hands it to the stream that uses it. `after`: the copy that
  /// is still writing `src` to the host (nullptr: none); the reload follows it.
  virtual c10::Storage copy_in(const void* src, int64_t bytes, c10::Device device, bool compressed,
                               const Ticket* after, std::shared_ptr<Ticket>* ticket) = 0;
  /// The host is about to block on back-pressure (begins) and has resumed (ends),
  /// for tensors on `device`: the GPU time the current stream ran dry in between
  /// (its work done before the host issued more) counts as
  /// StepStats::forward_stall_ms at collect(). A host wait while the GPU still
  /// has work queued costs nothing.
  virtual void host_wait_begins(const c10::Device& device) = 0;
  virtual void host_wait_ends(const c10::Device& device) = 0;
  /// `storage` is used by the current stream too (the allocator orders its reuse).
  virtual void record_use(const c10::Storage& storage) = 0;
  /// Waits for this step's copies; adds their busy times and stalls to `stats`,
  /// the time both directions were busy at once, and the link's peak rates.
  virtual void collect(StepStats& stats) = 0;
};

std::unique_ptr<CopyEngine> make_host_copy_engine(const OffloadOptions& options);
/// The first `bytes` of `storage` as a 1-d float32 tensor (compression's view).
at::Tensor float_view(const c10::Storage& storage, int64_t bytes);
/// nullptr when there is no CUDA device (or the build has no CUDA).
std::unique_ptr<CopyEngine> make_cuda_copy_engine(const OffloadOptions& options);

/// Caching-allocator statistics of the current CUDA device; zeros without CUDA.
struct AllocatorStats {
  int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
};
bool cuda_available();
AllocatorStats allocator_stats();
void reset_peak_stats();
/// Waits for all work on the current device (profiling only).
void device_synchronize();

}  // namespace fno::offload::detail
