// The writer thread that takes checkpoints and run outputs off the training
// thread (fno_train/background_writer.h): jobs run off the caller's thread, in
// order, one at a time; errors come back on the caller's thread as thrown;
// destruction waits; a snapshot does not change when the live tensors do.
#include <fno_train/background_writer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

TEST_CASE("the background writer runs jobs off the calling thread, in order, one at a time") {
  fno::BackgroundWriter writer;
  const auto caller = std::this_thread::get_id();
  std::vector<int> order;
  std::atomic<bool> first_done{false};
  std::atomic<bool> other_thread{true};
  const auto t0 = std::chrono::steady_clock::now();
  writer.submit([&] {
    if (std::this_thread::get_id() == caller) other_thread = false;
    std::this_thread::sleep_for(200ms);
    order.push_back(1);
    first_done = true;
  });
  // submit() returned at once: the job runs on the writer thread.
  CHECK(std::chrono::steady_clock::now() - t0 < 150ms);
  CHECK(!first_done);
  // A second request waits for the first (at most one in flight, none queued).
  writer.submit([&] { order.push_back(2); });
  CHECK(first_done);
  writer.wait();
  CHECK(other_thread);
  CHECK(order == std::vector<int>{1, 2});
  CHECK(writer.finished() == 2);
}

TEST_CASE("a failed background write is rethrown as thrown on the training thread, once") {
  fno::BackgroundWriter writer;
  writer.submit([] { throw std::runtime_error("run/checkpoint_latest.pt: write failed: File too large"); });
  bool ran = false;
  // The next request reports it, and is not written.
  CHECK_THROWS_WITH_AS(writer.submit([&] { ran = true; }),
                       "run/checkpoint_latest.pt: write failed: File too large",
                       std::runtime_error);
  writer.wait();
  CHECK(!ran);
  // Reported once: the writer goes on.
  writer.submit([&] { ran = true; });
  writer.wait();
  CHECK(ran);
  // wait() reports an error too, with its type (a TrainingError stays one).
  struct Custom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  writer.submit([] { throw Custom("custom"); });
  CHECK_THROWS_AS(writer.wait(), Custom);
  CHECK_NOTHROW(writer.wait());
}

TEST_CASE("destroying the background writer waits for the write in flight") {
  std::atomic<bool> done{false};
  {
    fno::BackgroundWriter writer;
    writer.submit([&] {
      std::this_thread::sleep_for(100ms);
      done = true;
    });
  }
  CHECK(done);
  // An unreported error is dropped by the destructor (it must not throw).
  {
    fno::BackgroundWriter writer;
    writer.submit([] { throw std::runtime_error("dropped"); });
  }
}

TEST_CASE("a tensor snapshot keeps its values while the live tensors change") {
  auto p = torch::arange(6, torch::kFloat).reshape({2, 3});
  auto step = torch::tensor(int64_t{7});
  auto strided = torch::arange(12, torch::kDouble).reshape({3, 4}).t();  // not contiguous
  fno::TensorDict live;
  live.insert("model.w", p);
  live.insert("optim.step", step);
  live.insert("strided", strided);
  const auto snap = fno::snapshot_tensors(live);
  const auto before_strided = strided.clone();
  p.add_(100);
  step.fill_(8);
  strided.mul_(-1);
  snap.wait();
  CHECK(snap.tensors.size() == 3);
  CHECK(torch::equal(snap.tensors["model.w"], torch::arange(6, torch::kFloat).reshape({2, 3})));
  CHECK(snap.tensors["optim.step"].item<int64_t>() == 7);
  CHECK(torch::equal(snap.tensors["strided"], before_strided));
  CHECK(snap.tensors["strided"].is_contiguous());
  CHECK(snap.tensors["model.w"].data_ptr() != p.data_ptr());
}
