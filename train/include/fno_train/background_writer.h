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
// One job is in flight and at most one waits queued behind it. A job is one
// request of the trainer (an epoch end's checkpoint_best.pt and
// checkpoint_latest.pt together, the final predictions.h5 and model.pt
// together), with the files it writes. A newer request replaces the queued one
// when it writes every file the queued one would: those files would be
// overwritten by the newer state anyway (a newer checkpoint_best.pt has the
// better metric). Otherwise submit() waits for the queue to empty, so no
// request that writes a file the newer one does not is ever dropped. Short
// epochs thus no longer wait for each checkpoint's serialization and fsync;
// the memory held is at most two snapshots beside the live state.
//
// A job that throws: its exception is kept and rethrown, as it was thrown (its
// type and message), on the training thread by the first submit() (which then
// drops its own job) or wait() after the failure; once. The destructor waits
// for the jobs in flight and queued and drops an error it did not report (the
// training thread is then already unwinding from another one).
#pragma once

#include <torch/torch.h>

#include <fno/serialize.h>

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  /// Waits for the jobs in flight and queued, then ends the thread; an
  /// unreported error is dropped.
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// Rethrows the error of a job that failed (and drops `job`); else hands
  /// `job` to the writer thread: it runs at once when the thread is idle, else
  /// waits queued. It replaces a queued job whose `files` (what each writes;
  /// none: never replaced) are all among its own; otherwise submit() first
  /// waits for the queued job to start.
  void submit(Job job, std::vector<std::string> files = {});
  /// Waits until no job is in flight or queued; rethrows the error of a failed job.
  void wait();
  /// Jobs finished so far (failed ones included).
  int64_t finished() const;
  /// Queued jobs replaced by newer ones so far.
  int64_t replaced() const;

 private:
  void loop();
  void rethrow_locked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Job job_;            // the job in flight (empty: idle)
  Job queued_;         // the job behind it (empty: none)
  std::vector<std::string> queued_files_;
  bool stop_ = false;  // the destructor asks the thread to end
  std::exception_ptr error_;
  int64_t finished_ = 0;
  int64_t replaced_ = 0;
  std::thread thread_;
};

}  // namespace fno
