// Group::Impl, shared by distributed.cpp (the group) and gradient_sync.cpp:
// the c10d backend of a group, its heartbeats, the guarded calls that turn a
// c10d failure into one line naming the ranks that stopped responding, and
// the ordered sums in flight.
#pragma once

#include <fno_train/distributed.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fno::dist {
namespace detail {

inline std::string first_line(const std::string& s) {
  // c10d's messages may carry a C++ backtrace after the first line.
  return s.substr(0, s.find('\n'));
}

// Complex tensors travel as their real views (both parts); real ones as they are.
inline at::Tensor real_view(const at::Tensor& t) {
  return t.is_complex() ? at::view_as_real(t) : t;
}

}  // namespace detail

struct Group::Impl {
  LaunchEnv env;
  torch::Device device{torch::kCPU};
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> store;  // prefixed "fno/"
  c10::intrusive_ptr<c10d::Backend> backend;
  std::string backend_name;

  // Heartbeats: every rank stamps "hb/<rank>" in the store each second, so
  // that a rank whose collective fails can name the ranks that went silent.
  std::atomic<bool> stop{false};
  std::thread heartbeat;
  // After a failed collective the backend is left alone at exit: tearing down
  // communicators with a peer gone can block.
  std::atomic<bool> failed{false};

  // A subgroup's ranks are named by their rank in the world too.
  std::string label;
  // A subgroup's rank r is rank world_ranks[r] of the world (empty: the world).
  std::vector<int64_t> world_ranks;
  int64_t world_rank(int64_t r) const {
    return world_ranks.empty() ? r : world_ranks[static_cast<size_t>(r)];
  }
  std::string who() const { return label.empty() ? "rank " + std::to_string(env.rank) : label; }

  // The ranks whose heartbeat stopped: read every stamp, wait a few beats,
  // read again. "" when all are alive (or this rank is alone).
  std::string silent_ranks() {
    std::ostringstream o;
    try {
      const auto stamps = [&] {
        std::vector<std::string> v(static_cast<size_t>(env.world_size));
        for (int64_t r = 0; r < env.world_size; ++r) {
          const std::string key = "hb/" + std::to_string(r);
          if (r != env.rank && store->check({key})) {
            const auto b = store->get(key);
            v[static_cast<size_t>(r)].assign(b.begin(), b.end());
          }
        }
        return v;
      };
      const auto before = stamps();
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));
      const auto after = stamps();
      for (int64_t r = 0; r < env.world_size; ++r) {
        if (r != env.rank && before[static_cast<size_t>(r)] == after[static_cast<size_t>(r)]) {
          o << (o.tellp() > 0 ? ", " : "") << world_rank(r);
        }
      }
    } catch (const std::exception&) {
      // The store itself is gone: it lives in rank 0 (or torchrun's agent).
      return env.agent_store ? "" : "0 (which hosts the rendezvous store)";
    }
    return o.str();
  }

  // Runs a c10d call; its failure becomes one line naming this rank and, when
  // the heartbeats tell, the ranks that went silent.
  template <class F>
  auto guarded(const std::string& what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      fail(what, e.what_without_backtrace());
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
    throw Error("unreachable");
  }

  [[noreturn]] void fail(const std::string& what, const std::string& msg) {
    failed = true;
    inflight->failed = true;
    const std::string silent = store ? silent_ranks() : "";
    throw Error(who() + ": " + what + " failed" +
                (silent.empty() ? std::string() : " (rank " + silent + " stopped responding)") +
                ": " + detail::first_line(msg));
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
    guarded(what, [&] {
      // NCCL: c10d's blocking wait looks at the work once a millisecond; poll
      // it here first (a CUDA event query), so that the host goes on within
      // microseconds of the sum, then let c10d's wait take what is left.
      using clock = std::chrono::steady_clock;
      const auto start = clock::now();
      while (backend_name == "nccl" && !work->isCompleted() && clock::now() - start < timeout) {
        if (clock::now() - start < std::chrono::milliseconds(2)) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
      const auto left = std::max(timeout - waited, std::chrono::milliseconds(1));
      if (!work->wait(left))
        throw std::runtime_error("timed out after " + std::to_string(timeout.count()) + " ms");
      return 0;
    });
  }

  // The ordered sums in flight (all_reduce_sum_ordered, NCCL): started, their
  // results ordered on the stream, not yet waited for by the host, oldest
  // first, each with the group that started it (whose rank its error names).
  // One queue for a group and its subgroups: a blocking collective on any of
  // them waits for all first, so that no two communicators' collectives are
  // in flight in an order that could differ between ranks.
  struct Pending {
    c10::intrusive_ptr<c10d::Work> work;
    Impl* owner = nullptr;
  };
  struct Inflight {
    std::mutex mu;
    std::deque<Pending> works;
    // A collective of the group or a subgroup failed: each of them leaves its
    // backend alone at exit (see failed).
    std::atomic<bool> failed{false};
  };
  std::shared_ptr<Inflight> inflight = std::make_shared<Inflight>();

  // With inflight->mu held: waits (each bounded by the timeout) for the
  // oldest sums in flight until `keep` are left. Returns how many of them had
  // not completed on the device when the host came to wait. A failure leaves
  // none in flight (the group is done for).
  static int64_t settle_locked(std::deque<Pending>& works, size_t keep) {
    int64_t blocked = 0;
    try {
      while (works.size() > keep) {
        const Pending& oldest = works.front();
        const auto done =
            oldest.owner->guarded("all-reduce", [&] { return oldest.work->isCompleted(); });
        if (!done) ++blocked;
        oldest.owner->wait(oldest.work, "all-reduce");
        works.pop_front();
      }
    } catch (...) {
      works.clear();
      throw;
    }
    return blocked;
  }
  int64_t settle(size_t keep) {
    std::lock_guard<std::mutex> lock(inflight->mu);
    return settle_locked(inflight->works, keep);
  }
};

}  // namespace fno::dist
