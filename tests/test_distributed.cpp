// fno_train/distributed.h on the CPU: two ranks as two threads of this process, a
// Gloo group over the loopback. The gradients of two ranks, each on half of a
// batch, must equal one process's on the whole batch: every parameter, the
// real and the imaginary parts of the complex spectral weights, under the
// offload policies whose gradients accumulate several times per step.
// (tests/cli/test_distributed.sh runs fno_train as separate processes.)
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fno/losses.h>
#include <fno_data/darcy.h>
#include <fno_engine/offload_step.h>
#include <fno_train/distributed.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "golden.h"
#include "ranks.h"

using fno::test::free_port;
using fno::test::rel_err;
using fno::test::run_ranks;

namespace {

// Every gradient, complex ones as their real views (both parts).
std::map<std::string, torch::Tensor> grads(const fno::FNO& model) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : model->named_parameters()) {
    const auto& t = p.value().grad();
    g[p.key()] =
        t.defined() ? (t.is_complex() ? torch::view_as_real(t) : t).clone() : torch::Tensor();
  }
  return g;
}

}  // namespace

TEST_CASE("epoch_batches shards an epoch as DistributedSampler does") {
  // Batch k of two ranks together is batch k of one process with twice the batch.
  const auto one = fno::data::epoch_batches(12, 4, true, 5, 2);
  const auto r0 = fno::data::epoch_batches(12, 2, true, 5, 2, 0, 2);
  const auto r1 = fno::data::epoch_batches(12, 2, true, 5, 2, 1, 2);
  REQUIRE(one.size() == 3);
  REQUIRE(r0.size() == 3);
  REQUIRE(r1.size() == 3);
  for (size_t k = 0; k < one.size(); ++k) {
    const auto both = std::get<0>(torch::sort(torch::cat({r0[k], r1[k]})));
    CHECK(torch::equal(both, std::get<0>(torch::sort(one[k]))));
  }
  // 7 samples on 3 ranks: padded to 9 with the order's own first entries,
  // every rank the same count, every sample somewhere.
  const auto order = torch::cat(fno::data::epoch_batches(7, 7, true, 1, 1));
  std::vector<torch::Tensor> parts;
  for (int64_t r = 0; r < 3; ++r) {
    const auto part = torch::cat(fno::data::epoch_batches(7, 2, true, 1, 1, r, 3));
    CHECK(part.numel() == 3);
    CHECK(part[0].item<int64_t>() == order[r].item<int64_t>());
    parts.push_back(part);
  }
  const auto all = torch::cat(parts);
  CHECK(std::get<0>(at::_unique(all)).numel() == 7);
  // The padded order is o0..o6, o0, o1; rank r takes r, r+3, r+6.
  CHECK(torch::equal(torch::cat({parts[1].narrow(0, 2, 1), parts[2].narrow(0, 2, 1)}),
                     order.narrow(0, 0, 2)));
  CHECK_THROWS(fno::data::epoch_batches(7, 2, true, 1, 1, 3, 3));
}

TEST_CASE(
    "two ranks' gradients equal one process's, real and imaginary parts, under offload policies") {
  const fno::FNOOptions opts = fno::FNOOptions({5, 4}, 1, 1, 8).n_layers(2);
  torch::manual_seed(3);
  const auto x = torch::randn({4, 1, 12, 11});
  const auto y = torch::randn({4, 1, 12, 11});
  const fno::H1Loss h1(fno::H1LossOptions().d(2));  // adds over batch entries
  const auto loss = [&](const torch::Tensor& out, const torch::Tensor& yy) { return h1(out, yy); };

  torch::manual_seed(0);
  fno::FNO reference(opts);
  loss(reference->forward(x), y).backward();
  const auto want = grads(reference);
  std::set<std::string> complex_names;
  for (const auto& p : reference->named_parameters()) {
    if (p.value().is_complex()) complex_names.insert(p.key());
  }
  REQUIRE(!complex_names.empty());
  // Rank 1 starts from other weights: the broadcast must replace them.
  torch::manual_seed(0);
  fno::FNO m0(opts);
  torch::manual_seed(1);
  fno::FNO m1(opts);
  std::vector<fno::FNO> models{m0, m1};
  // One offloader guard at a time per process: the two "ranks" take turns in
  // forward and backward (Gloo's all-reduces run on their own threads, so the
  // buckets a rank starts in backward complete when the other rank's start).
  std::mutex turns;

  struct Setting {
    const char* policy;
    int64_t chunks, micro_batches;
  };
  for (const Setting st : {Setting{"none", 1, 1}, Setting{"recompute", 2, 1}, Setting{"slim", 1, 2},
                           Setting{"all", 2, 1}}) {
    INFO("policy ", std::string(st.policy), ", chunks ", st.chunks, ", micro-batches ",
         st.micro_batches);
    std::vector<std::map<std::string, torch::Tensor>> got(2), got2(2), got3(2);
    std::vector<int64_t> buckets(2), overlapped(2);
    run_ranks(2, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
      auto& model = models[static_cast<size_t>(r)];
      {
        torch::NoGradGuard no_grad;
        if (r == 1) {
          for (auto& p : model->parameters()) p.add_(1.0);
        }
      }
      g->broadcast_from_main(model->parameters());
      // Small buckets: several of them, some started during backward.
      fno::dist::GradientSync sync(g, model->parameters(), fno::dist::GradientSyncOptions{4096});
      fno::OffloadSettings settings;
      settings.policy = fno::offload::parse_policy(st.policy);
      settings.chunks = st.chunks;
      settings.micro_batches = st.micro_batches;
      settings.options = fno::offload::OffloadOptions().simulate_on_cpu(true).min_bytes(0);
      fno::OffloadedStep step(model, settings);
      step.set_before_final_backward([&](const std::string& key) { sync.arm(key); });
      const auto xr = x.narrow(0, 2 * r, 2), yr = y.narrow(0, 2 * r, 2);
      // The first step learns how often each gradient accumulates; the second
      // starts buckets during backward.
      for (int s = 0; s < 2; ++s) {
        model->zero_grad(true);
        {
          std::lock_guard<std::mutex> lock(turns);
          step.forward_backward(xr, yr, loss);
        }
        sync.finish();
        (s == 0 ? got : got2)[static_cast<size_t>(r)] = grads(model);
      }
      buckets[static_cast<size_t>(r)] = sync.buckets();
      overlapped[static_cast<size_t>(r)] = sync.overlapped_last_step();
      // A third step as TrainStep takes it under CUDA graphs: no hooks; the
      // gradients packed, all-reduced between the graphs, written back.
      step.set_before_final_backward(nullptr);
      model->zero_grad(true);
      {
        std::lock_guard<std::mutex> lock(turns);
        step.forward_backward(xr, yr, loss);
      }
      sync.pack();
      sync.reduce();
      sync.unpack();
      got3[static_cast<size_t>(r)] = grads(model);
    });
    CHECK(buckets[0] > 2);
    CHECK(overlapped[0] > 0);
    for (int64_t r = 0; r < 2; ++r) {
      for (const auto* g : {&got[static_cast<size_t>(r)], &got2[static_cast<size_t>(r)],
                            &got3[static_cast<size_t>(r)]}) {
        for (const auto& [name, w] : want) {
          INFO("rank ", r, ", gradient of ", name);
          REQUIRE(g->count(name) == 1);
          const auto& t = g->at(name);
          REQUIRE(t.defined());
          // (fp32 sums over other splits of the batch: 1e-5 level differences)
          CHECK(rel_err(t, w) <= 5e-5);
          if (complex_names.count(name) != 0) {
            // A complex weight: the imaginary parts arrived too (not zeros).
            CHECK(w.select(-1, 1).abs().max().item<double>() > 0);
            CHECK(rel_err(t.select(-1, 1), w.select(-1, 1)) <= 5e-5);
          }
        }
      }
    }
  }
}

TEST_CASE("ordered sums on Gloo equal the blocking ones, and drain leaves them correct") {
  // Each rank's tensors: float, double and complex, summed ordered (several
  // in a row, then drain) and blocking.
  const auto make = [](int64_t r, int64_t k) {
    const auto base = torch::arange(6, torch::kFloat) * static_cast<double>(k + 1);
    const auto mine = base + 100.0 * static_cast<double>(r);
    if (k % 3 == 1) return mine.to(torch::kDouble);
    if (k % 3 == 2) return torch::complex(mine, -mine);
    return mine;
  };
  const int64_t count = 6;
  std::vector<std::vector<torch::Tensor>> ordered(2), blocking(2);
  std::vector<int64_t> waits(2), drained(2, -1);
  run_ranks(2, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
    auto& o = ordered[static_cast<size_t>(r)];
    auto& b = blocking[static_cast<size_t>(r)];
    for (int64_t k = 0; k < count; ++k) {
      o.push_back(make(r, k));
      waits[static_cast<size_t>(r)] += g->all_reduce_sum_ordered(o.back());
      o.back() = o.back() * 2;  // later work reads the sum
    }
    drained[static_cast<size_t>(r)] = g->drain();
    for (int64_t k = 0; k < count; ++k) {
      b.push_back(make(r, k));
      g->all_reduce_sum(b.back());
      b.back() = b.back() * 2;
    }
  });
  for (int64_t r = 0; r < 2; ++r) {
    INFO("rank ", r);
    // Gloo: every sum is a host wait, done when it returns; nothing left to drain.
    CHECK(waits[static_cast<size_t>(r)] == count);
    CHECK(drained[static_cast<size_t>(r)] == 0);
    for (int64_t k = 0; k < count; ++k) {
      INFO("sum ", k);
      const auto& got = ordered[static_cast<size_t>(r)][static_cast<size_t>(k)];
      const auto want = (make(0, k) + make(1, k)) * 2;
      CHECK(torch::equal(got, blocking[static_cast<size_t>(r)][static_cast<size_t>(k)]));
      CHECK(torch::equal(got, want));
    }
  }
}

TEST_CASE("a rank that does not join a collective makes the other fail within the timeout") {
  std::string error;
  auto t0 = std::chrono::steady_clock::now();
  double seconds = 0;
  const int port = free_port();
  std::thread t1;
  auto run = [&](int64_t r) {
    fno::dist::LaunchEnv env;
    env.rank = r;
    env.world_size = 2;
    env.master_port = port;
    fno::dist::GroupOptions o;
    o.backend = fno::dist::Backend::kGloo;
    o.timeout = std::chrono::seconds(2);
    auto g = fno::dist::Group::create(env, torch::kCPU, o);
    if (r == 0) {
      auto v = torch::ones({4});
      t0 = std::chrono::steady_clock::now();
      try {
        g->all_reduce_sum(v);  // rank 1 never joins it
      } catch (const fno::dist::Error& e) {
        error = e.what();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(6));
    }
  };
  std::thread a([&] {
    try {
      run(0);
    } catch (const std::exception&) {
    }
  });
  std::thread b([&] {
    try {
      run(1);
    } catch (const std::exception&) {
    }
  });
  a.join();
  b.join();
  CHECK(error.rfind("rank 0: all-reduce failed", 0) == 0);
  CHECK(error.find('\n') == std::string::npos);
  CHECK(seconds < 10);
}

TEST_CASE("launch_env reads torchrun's variables and names a bad one") {
  const auto set = [](const char* k, const char* v) {
    if (v) {
      ::setenv(k, v, 1);
    } else {
      ::unsetenv(k);
    }
  };
  const char* keys[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                        "MASTER_ADDR", "MASTER_PORT"};
  std::map<std::string, std::string> saved;
  for (const char* k : keys) {
    if (const char* v = std::getenv(k)) saved[k] = v;
    set(k, nullptr);
  }
  CHECK_FALSE(fno::dist::launch_env().has_value());
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  set("LOCAL_RANK", "1");
  set("MASTER_ADDR", "10.0.0.7");
  set("MASTER_PORT", "29999");
  const auto e = fno::dist::launch_env();
  REQUIRE(e.has_value());
  CHECK(e->rank == 1);
  CHECK(e->world_size == 2);
  CHECK(e->local_rank == 1);
  CHECK(e->master_addr == "10.0.0.7");
  CHECK(e->master_port == 29999);
  set("RANK", "2");
  CHECK_THROWS_WITH_AS(fno::dist::launch_env(), doctest::Contains("RANK=2 is outside 0..1"),
                       fno::dist::Error);
  set("RANK", "one");
  CHECK_THROWS_WITH_AS(fno::dist::launch_env(), doctest::Contains("RANK='one' is not an integer"),
                       fno::dist::Error);
  set("RANK", "0");
  set("MASTER_PORT", "70000");
  CHECK_THROWS_WITH_AS(fno::dist::launch_env(), doctest::Contains("MASTER_PORT=70000"),
                       fno::dist::Error);
  set("MASTER_PORT", "29999");
  set("MASTER_ADDR", nullptr);
  CHECK_THROWS_WITH_AS(fno::dist::launch_env(), doctest::Contains("MASTER_ADDR is not set"),
                       fno::dist::Error);
  for (const char* k : keys) set(k, saved.count(k) ? saved[k].c_str() : nullptr);
}
