// The writer thread that takes checkpoints and run outputs off the training
// thread (fno_train/background_writer.h): jobs run off the caller's thread, in
// order, one at a time, one queued behind the one in flight; a newer request
// replaces the queued one only when it writes every file that one would;
// errors come back on the caller's thread as thrown; destruction waits; a
// snapshot does not change when the live tensors do.
#include <fno_train/background_writer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
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
  // A second request queues behind the first without waiting.
  writer.submit([&] { order.push_back(2); });
  CHECK(!first_done);
  // A third that does not write the second's files (none) waits for it to start.
  writer.submit([&] { order.push_back(3); });
  CHECK(first_done);
  writer.wait();
  CHECK(other_thread);
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK(writer.finished() == 3);
  CHECK(writer.replaced() == 0);
}

TEST_CASE("a newer checkpoint request replaces the queued one only when it writes all its files") {
  fno::BackgroundWriter writer;
  std::vector<std::string> written;
  std::atomic<bool> release{false};
  const auto request = [&](std::vector<std::string> files, bool block = false) {
    writer.submit(
        [&written, &release, files, block] {
          while (block && !release) std::this_thread::sleep_for(1ms);
          for (const auto& f : files) written.push_back(f);
        },
        files);
  };
  request({"epoch1/latest"}, /*block=*/true);  // in flight until released
  // Epoch ends while it writes: each newer request that writes the queued
  // one's files replaces it, without waiting.
  const auto t0 = std::chrono::steady_clock::now();
  request({"best", "latest"});
  request({"best", "latest"});  // replaces the one before
  request({"latest", "best"});  // the same files, in another order: replaces
  CHECK(std::chrono::steady_clock::now() - t0 < 100ms);
  CHECK(writer.replaced() == 2);
  // A request that does not write "best" must not drop a queued best: it
  // waits for the queued one to start.
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    release = true;
  });
  request({"latest"});
  releaser.join();
  writer.wait();
  CHECK(writer.replaced() == 2);
  CHECK(written == std::vector<std::string>{"epoch1/latest", "latest", "best", "latest"});
  CHECK(writer.finished() == 3);
}

TEST_CASE("a failed background write is rethrown as thrown on the training thread, once") {
  fno::BackgroundWriter writer;
  writer.submit([] { throw std::runtime_error("run/checkpoint_latest.pt: write failed: File too large"); });
  // (the failure is reported by the first request after it)
  std::this_thread::sleep_for(50ms);
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
