// Several ranks of one process group in one test process: each rank a thread,
// the group's rendezvous over the loopback.
#pragma once

#include <doctest/doctest.h>
#include <fno_train/distributed.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "golden.h"

namespace fno::test {

/// fn(rank, group) on n threads, as the ranks 0 .. n-1 of one group: Gloo on
/// the CPU, or with `cuda` NCCL, rank r on GPU r. What a rank throws is a
/// failed CHECK with its message, after every thread joined.
inline void run_ranks(int64_t n,
                      const std::function<void(int64_t, std::shared_ptr<fno::dist::Group>)>& fn,
                      bool cuda = false) {
  const int port = free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fno::dist::LaunchEnv env;
        env.rank = r;
        env.world_size = n;
        env.local_rank = r;
        env.local_world_size = n;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        fno::dist::GroupOptions o;
        o.backend = cuda ? fno::dist::Backend::kNccl : fno::dist::Backend::kGloo;
        o.timeout = std::chrono::seconds(60);
        const auto device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r))
                                 : torch::Device(torch::kCPU);
        fn(r, fno::dist::Group::create(env, device, o));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
}

}  // namespace fno::test
