#include <fno_train/background_writer.h>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <signal.h>

#include <algorithm>
#include <utility>

namespace fno {

void TensorSnapshot::wait() const {
  if (ready) static_cast<c10::Event*>(ready.get())->synchronize();
}

TensorSnapshot snapshot_tensors(const TensorDict& tensors) {
  torch::NoGradGuard no_grad;
  TensorSnapshot snap;
  std::optional<c10::Device> gpu;
  for (const auto& item : tensors) {
    const auto& t = item.value();
    if (t.device().is_cpu()) {
      snap.tensors.insert(item.key(), t.detach().clone(at::MemoryFormat::Contiguous));
      continue;
    }
    // Pinned, so that the copy is asynchronous; the stream orders it before
    // the step that next mutates `t`.
    auto host = at::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(t.is_cuda()));
    host.copy_(t.detach(), /*non_blocking=*/true);
    snap.tensors.insert(item.key(), host);
    gpu = t.device();
  }
  if (gpu && gpu->is_cuda()) {
    const c10::impl::VirtualGuardImpl impl(gpu->type());
    auto event = std::make_shared<c10::Event>(gpu->type());
    event->record(impl.getStream(*gpu));
    snap.ready = std::static_pointer_cast<void>(event);
  }
  return snap;
}

BackgroundWriter::BackgroundWriter() {
  // The thread inherits the signal mask: block the stop signals while it is
  // created, so that they always reach the training thread.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  thread_ = std::thread([this] { loop(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

BackgroundWriter::~BackgroundWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !job_ && !queued_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundWriter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || static_cast<bool>(job_); });
    if (!job_) return;  // stop_, and nothing in flight
    Job job = job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    job = nullptr;  // the snapshot goes here, off the training thread
    lock.lock();
    if (error && !error_) error_ = error;
    // The queued job, if any, starts now.
    job_ = std::move(queued_);
    queued_ = nullptr;
    queued_files_.clear();
    ++finished_;
    cv_.notify_all();
  }
}

void BackgroundWriter::rethrow_locked() {
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void BackgroundWriter::submit(Job job, std::vector<std::string> files) {
  const auto covers = [&files](const std::vector<std::string>& older) {
    if (older.empty()) return false;
    for (const auto& f : older) {
      if (std::find(files.begin(), files.end(), f) == files.end()) return false;
    }
    return true;
  };
  Job dropped;  // a replaced job: its snapshot goes after the lock is released
  {
    std::unique_lock<std::mutex> lock(mu_);
    rethrow_locked();
    if (queued_ && covers(queued_files_)) {
      dropped = std::move(queued_);
      ++replaced_;
    } else {
      cv_.wait(lock, [this] { return !queued_; });
      rethrow_locked();
    }
    if (!job_) {
      job_ = std::move(job);
    } else {
      queued_ = std::move(job);
      queued_files_ = std::move(files);
    }
  }
  cv_.notify_all();
}

void BackgroundWriter::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !job_ && !queued_; });
  rethrow_locked();
}

int64_t BackgroundWriter::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

int64_t BackgroundWriter::replaced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replaced_;
}

}  // namespace fno
