// Checkpoints and run outputs written off the training thread (issue 28).
//
// The training thread takes a snapshot of what it wants written
// (snapshot_tensors: host copies of the live tensors, so that training can go
// on mutating them) and hands a job that writes it to the one BackgroundWriter
// thread. The job writes as the training thread did before: atomically and
// durably (temporary file, fsync, rename, directory fsync: write_file_atomic).
//
//   BackgroundWriter writer;
//   auto snap = snapshot_tensors(checkpoint_dict(...));   // on the training thread
//   writer.submit([snap] { snap.wait(); save_checkpoint_file(snap.tensors, path); });
//   ...
//   writer.wait();  // before reading the files, at a stop and at the end
//
// At most one job is in flight and none is queued: submit() first waits for
// the job in flight to finish. A job is one request of the trainer (an epoch
// end's checkpoint_best.pt and checkpoint_latest.pt together, the final
// predictions.h5 and model.pt together), so that waiting only happens when a
// request comes before the previous one is on disk; the memory held is at
// most one snapshot beside the live state. (Replacing a queued request would
// drop a checkpoint_best.pt; waiting keeps every request.)
//
// A job that throws: its exception is kept and rethrown, as it was thrown (its
// type and message), on the training thread by the next submit() (which then
// drops its own job) or wait(); once. The destructor waits for the job in
// flight and drops an error it did not report (the training thread is then
// already unwinding from another one).
#pragma once

#include <torch/torch.h>

#include <fno/serialize.h>

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace fno {

/// Host copies of a dict of tensors, taken on the calling thread. CPU tensors
/// are cloned; CUDA tensors are copied into pinned host memory with
/// asynchronous copies on the current stream, ordered before whatever the
/// stream does next (the optimizer's next step), and an event recorded after
/// them: wait() (on any thread) blocks until the copies are done. The
/// training thread does not synchronize with the GPU for a snapshot.
struct TensorSnapshot {
  TensorDict tensors;
  /// Blocks until the host copies hold their values (a no-op for CPU tensors).
  void wait() const;
  std::shared_ptr<void> ready;  // the CUDA event, when a tensor came from a GPU
};

TensorSnapshot snapshot_tensors(const TensorDict& tensors);

class BackgroundWriter {
 public:
  using Job = std::function<void()>;

  /// Starts the writer thread (SIGINT and SIGTERM blocked in it: the training
  /// thread takes them).
  BackgroundWriter();
  /// Waits for the job in flight, then ends the thread; an unreported error is dropped.
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// Waits for the job in flight; rethrows its error if it failed (and drops
  /// `job`); else hands `job` to the writer thread and returns at once.
  void submit(Job job);
  /// Waits until no job is in flight; rethrows the error of a failed job.
  void wait();
  /// Jobs finished so far (failed ones included).
  int64_t finished() const;

 private:
  void loop();
  void rethrow_locked(std::unique_lock<std::mutex>& lock);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Job job_;            // the job in flight (empty: idle)
  bool stop_ = false;  // the destructor asks the thread to end
  std::exception_ptr error_;
  int64_t finished_ = 0;
  std::thread thread_;
};

}  // namespace fno
