// offload/ on the CPU: the offloader's host engine moves CPU tensors into a
// separate pool (OffloadOptions::simulate_on_cpu), so every policy, the
// deduplication, the parameter filter, prefetch, degradation and the thread
// behaviour are checked here; tests/test_gpu_offload.cpp repeats the gradient
// checks with the CUDA engine.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <thread>

#include <fno/losses.h>
#include <fno_engine/offload_step.h>
#include <fno_offload/tiles.h>
#include <fno_train/train_step.h>

#include "golden.h"
#include "offload_check.h"

using fno::offload::Level;
using fno::offload::Offloader;
using fno::offload::OffloadGuard;
using fno::offload::OffloadOptions;
using fno::test::rel_err;
using fno::test::run_step;

namespace {

OffloadOptions sim() { return OffloadOptions().simulate_on_cpu(true).min_bytes(0); }

struct Case {
  std::vector<int64_t> modes;
  std::vector<int64_t> shape;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {{6}, {4, 2, 33}}, {{5, 4}, {4, 1, 12, 11}}, {{3, 3, 2}, {2, 1, 7, 6, 5}}};
  return c;
}

fno::FNO make_model(const Case& c) {
  torch::manual_seed(3);
  return fno::FNO(fno::FNOOptions(c.modes, c.shape[1], 1, 8).n_layers(3).domain_padding({0.25}));
}

}  // namespace

TEST_CASE("every offload policy gives the gradients of no offload (1D, 2D, 3D, CPU)") {
  for (const auto& c : cases()) {
    INFO("input shape ", torch::IntArrayRef(c.shape));
    auto model = make_model(c);
    torch::manual_seed(4);
    const auto x = torch::randn(c.shape);
    const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
    const auto w = torch::rand_like(model->forward(x).detach());
    const auto ref = run_step(model, x, w, nullptr, nullptr);
    for (const std::string policy :
         {"none", "slim", "all", "blocks:2", "recompute", "recompute+offload"}) {
      for (int64_t chunks : {1, 2}) {
        INFO("policy ", policy, ", chunks ", chunks);
        Offloader off(sim());
        off.exclude(*model);
        const auto plan =
            fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, chunks);
        const auto got = run_step(model, x, w, &plan, &off);
        if (chunks == 1 && policy == "none") {
          // The same kernels on the same bytes: bit-identical.
          CHECK(torch::equal(got.output, ref.output));
          for (const auto& kv : ref.grads) {
            // (no structured binding: clang 14 cannot capture one in INFO)
            const auto& name = kv.first;
            const auto& g = kv.second;
            INFO("gradient of ", name);
            CHECK(torch::equal(got.grads.at(name), g));
          }
        } else {
          // Batch chunks sum the weight gradients in another order, and the
          // slim variants (every level but keep) their gradient terms.
          CHECK(rel_err(got.output, ref.output) <= 1e-6);
          for (const auto& kv : ref.grads) {
            // (no structured binding: clang 14 cannot capture one in INFO)
            const auto& name = kv.first;
            const auto& g = kv.second;
            INFO("gradient of ", name);
            CHECK(rel_err(got.grads.at(name), g) <= 1e-5);
          }
        }
        const auto& s = got.stats;
        CHECK(s.saved_tensors > 0);
        if (policy == "none" || policy == "slim" || policy == "recompute") {
          CHECK(s.offloaded_tensors == 0);
        } else {
          CHECK(s.offloaded_tensors > 0);
          CHECK(s.bytes_offloaded > 0);
          // Everything offloaded came back (or was used before it left).
          CHECK(s.bytes_prefetched + s.bytes_fetched_on_demand + s.bytes_reused_on_device >=
                s.bytes_offloaded);
        }
        if (policy == "recompute+offload") {
          // Only the stage inputs are saved (and offloaded; the chunks of one
          // input are views of one storage): the recompute inside backward
          // keeps what it saves, on whichever thread runs it. The last stage's
          // input stays when that stage is one scope (ScopeOptions::last).
          CHECK(s.offloaded_tensors == static_cast<int64_t>(stages.size()) - (chunks == 1 ? 1 : 0));
        }
        CHECK(s.kept_degraded == 0);
      }
    }
  }
}

TEST_CASE("in bf16 and fp16 every policy follows fp32's gradients and stores half the bytes") {
  // Mixed precision under offload: activations are saved (and moved) in the
  // compute type, so every policy stores half the bytes of fp32; the gradients
  // stay within the precision's tolerance of the plain fp32 step (the same
  // bounds as test_precision.cpp's).
  const auto& c = cases()[1];
  auto model = make_model(c);
  torch::manual_seed(4);
  const auto x = torch::randn(c.shape);
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  for (const std::string policy : {"none", "all", "recompute+offload"}) {
    std::map<c10::ScalarType, int64_t> stored;
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      INFO("policy ", policy, ", dtype ", dtype);
      model->options.compute_dtype(dtype);
      Offloader off(sim());
      off.exclude(*model);
      const auto plan = fno::offload::plan_for_policy(
          fno::offload::parse_policy(policy == "none" ? "all" : policy), stages, 2);
      const auto got = run_step(model, x, w, policy == "none" ? nullptr : &plan,
                                policy == "none" ? nullptr : &off);
      model->options.compute_dtype(torch::kFloat);
      const double tol = dtype == torch::kFloat ? 1e-5 : dtype == torch::kBFloat16 ? 3e-2 : 4e-3;
      CHECK((got.output.scalar_type() == torch::kFloat));
      CHECK(rel_err(got.output, ref.output) <= tol);
      for (const auto& kv : ref.grads) {
        const auto& name = kv.first;
        INFO("gradient of ", name);
        CHECK((got.grads.at(name).scalar_type() == kv.second.scalar_type()));
        CHECK(rel_err(got.grads.at(name), kv.second) <= tol);
      }
      stored[dtype] = got.stats.bytes_offloaded;
    }
    if (policy != "none") {
      // Half, but for the kept spectra, which stay complex64 (a few percent here).
      MESSAGE(policy, ": bytes stored, fp32 ", stored[torch::kFloat], ", bf16 ",
              stored[torch::kBFloat16]);
      CHECK(stored[torch::kBFloat16] <= 0.55 * static_cast<double>(stored[torch::kFloat]));
      CHECK(stored[torch::kHalf] == stored[torch::kBFloat16]);
    }
  }
}

TEST_CASE("a storage saved twice, or through views, is offloaded once") {
  Offloader off(sim());
  const auto x = torch::randn({64, 64}, torch::requires_grad());
  const auto a = x * 2;  // a non-leaf, so that it is not filtered as a parameter
  off.begin_step();
  torch::Tensor y;
  {
    OffloadGuard guard(off);
    // mul saves a twice; mm saves a and the view a.t() (one storage).
    y = (a * a).sum() + torch::mm(a, a.t()).sum();
  }
  y.backward();
  const auto s = off.end_step();
  CHECK(s.offloaded_tensors == 1);
  CHECK(s.dedup_hits == 3);
  CHECK(s.bytes_offloaded == 64 * 64 * 4);
  const auto xr = x.detach().clone().requires_grad_(true);
  const auto ar = xr * 2;
  ((ar * ar).sum() + torch::mm(ar, ar.t()).sum()).backward();
  CHECK(torch::equal(x.grad(), xr.grad()));
}

TEST_CASE("parameters, buffers and their views are never offloaded") {
  Offloader off(sim());
  torch::nn::Linear lin(32, 32);
  const auto buffer = torch::randn({32, 32});  // excluded by hand; no grad, not a leaf parameter
  off.exclude(*lin);
  off.exclude(buffer);
  const auto x = torch::randn({8, 32}, torch::requires_grad()) * 1.0;
  off.begin_step();
  torch::Tensor y;
  {
    OffloadGuard guard(off);
    // linear saves the weight (as a view); matmul saves buffer; x is saved too.
    y = torch::matmul(lin->forward(x), buffer).sum();
  }
  y.backward();
  const auto s = off.end_step();
  CHECK(s.kept_parameter >= 2);
  CHECK(s.offloaded_tensors >= 1);  // x and the linear output
  // A parameter that was never excluded is still recognised as a leaf that requires grad.
  const auto p = torch::randn({16, 16}, torch::requires_grad());
  off.begin_step();
  {
    OffloadGuard guard(off);
    y = torch::mm(p.t(), p).sum();
  }
  y.backward();
  const auto s2 = off.end_step();
  CHECK(s2.offloaded_tensors == 0);
  CHECK(s2.kept_parameter == 2);
}

TEST_CASE("small tensors stay, and the guard's level decides") {
  Offloader off(OffloadOptions().simulate_on_cpu(true).min_bytes(1024));
  const auto big = torch::randn({64, 64}) * 1;
  const auto small = torch::randn({4, 4}) * 1;
  const auto wb = torch::randn({64, 64}, torch::requires_grad());
  const auto ws = torch::randn({4, 4}, torch::requires_grad());
  off.begin_step();
  {
    OffloadGuard guard(off);
    (torch::mm(big, wb).sum() + torch::mm(small, ws).sum()).backward();
  }
  auto s = off.end_step();
  CHECK(s.offloaded_tensors == 1);
  CHECK(s.kept_small == 1);
  off.begin_step();
  {
    OffloadGuard guard(off, Level::kKeep);
    torch::mm(big, wb).sum().backward();
  }
  s = off.end_step();
  CHECK(s.offloaded_tensors == 0);
  CHECK(s.kept_level >= 1);
}

TEST_CASE("backward and the recompute inside it may run on another thread") {
  const auto& c = cases()[1];
  auto model = make_model(c);
  torch::manual_seed(5);
  const auto x = torch::randn(c.shape);
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  for (const std::string policy : {"all", "recompute+offload"}) {
    INFO("policy ", policy);
    Offloader off(sim());
    off.exclude(*model);
    const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages);
    model->zero_grad(true);
    off.begin_step();
    torch::Tensor loss;
    {
      OffloadGuard guard(off, Level::kKeep);
      loss = ((fno::offload::run_stages(stages, plan, x, &off) - 0.5).pow(2) * w).sum();
    }
    // The guard is gone and backward runs elsewhere: the hooks travel with the graph.
    std::thread t([&loss] { loss.backward(); });
    t.join();
    const auto s = off.end_step();
    for (const auto& kv : ref.grads) {
      // (no structured binding: clang 14 cannot capture one in INFO)
      const auto& name = kv.first;
      const auto& g = kv.second;
      INFO("gradient of ", name);
      CHECK(rel_err(model->named_parameters()[name].grad(), g) <= 1e-5);
    }
    if (policy == "recompute+offload")
      CHECK(s.offloaded_tensors == static_cast<int64_t>(stages.size()) - 1);
  }
}

TEST_CASE("an in-place change after saving is detected at unpack") {
  Offloader off(sim());
  const auto w = torch::randn({16, 16}, torch::requires_grad());
  auto a = torch::randn({16, 16}) * 1;
  torch::Tensor y;
  {
    OffloadGuard guard(off);
    y = torch::mm(a, w).sum();
  }
  a.add_(1);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("modified by an inplace operation"),
                       c10::Error);
}

TEST_CASE("without pinned memory, offload keeps tensors on the device and warns") {
  const auto& c = cases()[0];
  auto model = make_model(c);
  const auto x = torch::randn(c.shape);
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  Offloader off(sim().host_memory_limit(4096));
  off.exclude(*model);
  const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy("all"), stages);
  const auto got = run_step(model, x, w, &plan, &off);
  CHECK(got.stats.kept_degraded > 0);
  for (const auto& [name, g] : ref.grads) CHECK(rel_err(got.grads.at(name), g) <= 1e-5);
}

TEST_CASE("prefetch brings tensors back ahead of need, within its byte window") {
  const auto& c = cases()[1];
  auto model = make_model(c);
  const auto x = torch::randn(c.shape);
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy("all"), stages);
  for (int64_t depth : {0, 1, 3}) {
    INFO("prefetch depth ", depth);
    // Depth 0 fetches a stage's tensors as backward reaches the stage, before
    // its first use; deeper windows start earlier.
    Offloader off(sim().prefetch_depth(depth));
    off.exclude(*model);
    const auto s = run_step(model, x, w, &plan, &off).stats;
    CHECK(s.bytes_prefetched + s.bytes_fetched_on_demand == s.bytes_offloaded);
    CHECK(s.bytes_fetched_on_demand == 0);
  }
  // A window of one byte holds one tensor at a time: the rest comes on demand.
  Offloader narrow(sim().max_prefetch_bytes(1));
  narrow.exclude(*model);
  const auto s = run_step(model, x, w, &plan, &narrow).stats;
  CHECK(s.bytes_fetched_on_demand > 0);
  CHECK(s.bytes_prefetched > 0);
  CHECK(s.bytes_prefetched + s.bytes_fetched_on_demand == s.bytes_offloaded);
}

TEST_CASE("slim stages store fewer bytes for the same gradients") {
  // Every stored tensor is counted by the offloader (min_bytes 0), once with
  // the stages' full functions and once with their slim variants.
  const auto& c = cases()[1];
  auto model = make_model(c);
  const auto x = torch::randn({2, 1, 40, 36});
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  std::map<bool, int64_t> moved;
  std::map<bool, std::map<std::string, torch::Tensor>> grads;
  for (bool slim : {false, true}) {
    auto st = stages;
    if (!slim) {
      for (auto& s : st) s.fn_slim = nullptr;  // kOffload then runs fn
    }
    Offloader off(sim());
    off.exclude(*model);
    const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy("all"), st);
    model->zero_grad(true);
    off.begin_step();
    {
      OffloadGuard guard(off, Level::kKeep);
      ((fno::offload::run_stages(st, plan, x, &off) - 0.5).pow(2) * w).sum().backward();
    }
    moved[slim] = off.end_step().bytes_offloaded;
    for (const auto& p : model->named_parameters()) grads[slim][p.key()] = p.value().grad().clone();
  }
  MESSAGE("bytes stored per step: full ", moved[false], ", slim ", moved[true]);
  // A block stores 2 of its 3.5 hidden-width tensors, an MLP only its input.
  CHECK(moved[true] < moved[false] * 0.65);
  for (const auto& kv : grads[false]) {
    INFO("gradient of ", kv.first);
    CHECK(rel_err(grads[true].at(kv.first), kv.second) <= 1e-5);
  }
}

TEST_CASE("prefetch counts stages, not chunks; the last scope's tensors stay for the turn") {
  const auto& c = cases()[1];
  auto model = make_model(c);
  const auto x = torch::randn({8, 1, 12, 11});
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  for (const std::string policy : {"all", "recompute+offload"}) {
    for (int64_t chunks : {1, 2, 4}) {
      INFO("policy ", policy, ", chunks ", chunks);
      Offloader off(sim().prefetch_depth(1));
      off.exclude(*model);
      const auto plan =
          fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, chunks);
      const auto got = run_step(model, x, w, &plan, &off);
      const auto& s = got.stats;
      // One stage ahead is prefetched whatever the chunk count, and what the
      // last scope saved never leaves the GPU: nothing waits for a reload.
      CHECK(s.bytes_fetched_on_demand == 0);
      CHECK(s.bytes_prefetched > 0);
      // What the last scope saves stays; what the earlier chunks of a chunked
      // last stage offloaded, its last chunk takes back (one storage).
      if (chunks > 1 && policy == "recompute+offload") {
        CHECK(s.bytes_reused_on_device > 0);
      } else {
        CHECK(s.kept_last > 0);
      }
      CHECK(s.bytes_prefetched + s.bytes_reused_on_device >= s.bytes_offloaded);
      for (const auto& kv : ref.grads) {
        const auto& name = kv.first;
        INFO("gradient of ", name);
        CHECK(rel_err(got.grads.at(name), kv.second) <= 1e-5);
      }
    }
  }
}

TEST_CASE("compressed offload moves half the bytes, with gradients within bfloat16 rounding") {
  for (const auto& c : cases()) {
    INFO("input shape ", torch::IntArrayRef(c.shape));
    auto model = make_model(c);
    torch::manual_seed(4);
    const auto x = torch::randn(c.shape);
    const auto w = torch::rand_like(model->forward(x).detach());
    const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
    const auto ref = run_step(model, x, w, nullptr, nullptr);
    for (const std::string policy : {"all", "recompute+offload"}) {
      INFO("policy ", policy);
      const auto plan = fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages);
      Offloader lossless(sim());
      lossless.exclude(*model);
      const auto exact = run_step(model, x, w, &plan, &lossless).stats;
      Offloader off(sim().compress(fno::offload::Compress::kBF16));
      off.exclude(*model);
      const auto got = run_step(model, x, w, &plan, &off);
      // Float32 storages move as bfloat16; others (the spectral conv's complex
      // tensors) as they are.
      CHECK(got.stats.compressed_tensors > 0);
      CHECK(got.stats.compressed_tensors <= got.stats.offloaded_tensors);
      CHECK(got.stats.bytes_offloaded < 0.6 * exact.bytes_offloaded);
      // The output is computed before anything is reloaded: exact.
      CHECK(torch::equal(got.output, ref.output));
      double worst = 0;
      for (const auto& kv : ref.grads) {
        const auto& name = kv.first;
        const double err = rel_err(got.grads.at(name), kv.second);
        INFO("gradient of ", name, ": relative error ", err);
        CHECK(err <= 2e-2);
        worst = std::max(worst, err);
      }
      MESSAGE(policy, " bf16: worst gradient error ", worst);
      CHECK(worst > 0);  // it is lossy: the test would not see a no-op
    }
  }
  CHECK(fno::offload::parse_compress("bf16") == fno::offload::Compress::kBF16);
  CHECK_THROWS_WITH_AS(fno::offload::parse_compress("fp8"), doctest::Contains("'fp8'"),
                       std::invalid_argument);
}

TEST_CASE("plans print and parse back; a bad plan names what does not fit") {
  const auto& c = cases()[1];
  auto model = make_model(c);
  const auto stages = fno::fno_stages(model, {12, 11});
  fno::offload::Plan plan;
  plan.stages = {{Level::kRecompute, 2},
                 {Level::kOffload, 1},
                 {Level::kKeep, 1},
                 {Level::kRecomputeOffload, 4},
                 {Level::kKeep, 2}};
  const auto text = plan.to_string(stages);
  CHECK(text ==
        "lifting=recompute/2, block.0=offload, block.1=keep, block.2=recompute+offload/4, "
        "projection=keep/2");
  CHECK(fno::offload::parse_plan(text, stages).to_string(stages) == text);
  plan.micro_batches = 4;
  const auto micro = plan.to_string(stages);
  CHECK(micro.rfind("micro_batches=4; lifting=recompute/2", 0) == 0);
  CHECK(fno::offload::parse_plan(micro, stages).micro_batches == 4);
  CHECK(fno::offload::parse_plan(micro, stages).to_string(stages) == micro);
  for (const std::string bad :
       {"lifting=keep",
        "lifting=sometimes, block.0=keep, block.1=keep, block.2=keep, projection=keep",
        "lifting=keep/x, block.0=keep, block.1=keep, block.2=keep, projection=keep",
        "block.0=keep, lifting=keep, block.1=keep, block.2=keep, projection=keep",
        "micro_batches=0; lifting=keep, block.0=keep, block.1=keep, block.2=keep, "
        "projection=keep"}) {
    INFO("plan '", bad, "'");
    CHECK_THROWS_WITH_AS(fno::offload::parse_plan(bad, stages), doctest::Contains(bad.c_str()),
                         std::invalid_argument);
  }
}

TEST_CASE("micro-batches give the gradients of the whole batch (sum and mean losses)") {
  const auto& c = cases()[1];
  auto model = make_model(c);
  torch::manual_seed(9);
  const auto x = torch::randn({8, 1, 12, 11});
  const auto y = torch::randn({8, 1, 12, 11});
  for (bool mean : {false, true}) {
    const fno::H1Loss h1(
        fno::H1LossOptions().d(2).reduction(mean ? fno::Reduction::kMean : fno::Reduction::kSum));
    const auto loss = [&](const torch::Tensor& out, const torch::Tensor& yy) {
      return h1(out, yy);
    };
    model->zero_grad(true);
    const auto ref_loss = loss(model->forward(x), y);
    ref_loss.backward();
    std::map<std::string, torch::Tensor> ref;
    for (const auto& p : model->named_parameters()) ref[p.key()] = p.value().grad().clone();
    for (const std::string policy : {"none", "slim", "recompute"}) {
      for (int64_t k : {2, 3, 8}) {
        INFO("mean ", mean, ", policy ", policy, ", micro-batches ", k);
        fno::OffloadSettings settings;
        settings.policy = fno::offload::parse_policy(policy);
        settings.micro_batches = k;
        fno::OffloadedStep step(model, settings);
        model->zero_grad(true);
        const auto l = step.forward_backward(x, y, loss, mean);
        CHECK(rel_err(l, ref_loss.detach()) <= 1e-6);
        for (const auto& kv : ref) {
          INFO("gradient of ", kv.first);
          // The micro-batches' gradients add in another order than the whole batch's
          // reductions: on some CPUs a small gradient summed over every grid point
          // and batch entry (a spectral conv's bias) then moves by 1.3e-5.
          CHECK(rel_err(model->named_parameters()[kv.first].grad(), kv.second) <= 3e-5);
        }
      }
    }
  }
}

TEST_CASE("without a device the guard does nothing") {
  if (torch::cuda::is_available()) return;
  Offloader off;  // the CUDA engine
  CHECK_FALSE(off.active());
  CHECK(off.describe().find("off (no CUDA device)") != std::string::npos);
  const auto w = torch::randn({8, 8}, torch::requires_grad());
  {
    OffloadGuard guard(off);
    torch::mm(torch::randn({8, 8}), w).sum().backward();
  }
  CHECK(w.grad().defined());
}

TEST_CASE("offload policies and memory sizes parse, with errors naming the value") {
  using fno::offload::Policy;
  CHECK(fno::offload::parse_policy("blocks:3").blocks == 3);
  CHECK(fno::offload::parse_policy("recompute+offload").kind == Policy::Kind::kRecomputeOffload);
  CHECK_THROWS_WITH_AS(fno::offload::parse_policy("sometimes"),
                       doctest::Contains("unknown offload policy 'sometimes'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(fno::offload::parse_policy("blocks:x"), doctest::Contains("'blocks:x'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(fno::offload::parse_policy("blocks:-1"), doctest::Contains("'blocks:-1'"),
                       std::invalid_argument);
  CHECK(fno::offload::parse_bytes("16GiB") == (int64_t{16} << 30));
  CHECK(fno::offload::parse_bytes("8 GB") == int64_t{8000000000});
  CHECK(fno::offload::parse_bytes("512MiB") == (int64_t{512} << 20));
  CHECK(fno::offload::parse_bytes("1.5e9") == int64_t{1500000000});
  for (const std::string bad : {"", "lots", "16XB", "-1GiB", "0", "nan", "1e30GiB"}) {
    INFO("text '", bad, "'");
    const std::string quoted = "'" + bad + "'";
    CHECK_THROWS_WITH_AS(fno::offload::parse_bytes(bad), doctest::Contains(quoted.c_str()),
                         std::invalid_argument);
  }
  CHECK(fno::offload::format_bytes(int64_t{3} << 30) == "3.00 GiB");
}

TEST_CASE("the in-flight window grows by what the link drained while the GPU waited for forward") {
  using fno::offload::grown_inflight_window;
  constexpr int64_t kMiB = int64_t{1} << 20, kGiB = int64_t{1} << 30;
  fno::offload::StepStats st;
  st.bytes_offloaded = 20 * kGiB;
  st.d2h_seconds = 0.4;       // 20 GiB / 0.4 s: 50 GiB/s
  st.forward_wait_ms = 150;   // the host's wait: the GPU still had work for 50 ms of it
  st.forward_stall_ms = 100;  // 5 GiB drained while the GPU sat idle
  st.peak_allocated = 18 * kGiB;
  CHECK(grown_inflight_window(kGiB, st, 80 * kGiB) == 6 * kGiB);
  // Within the memory limit: the step's peak plus the growth.
  CHECK(grown_inflight_window(kGiB, st, 21 * kGiB) == 4 * kGiB);
  CHECK(grown_inflight_window(kGiB, st, 18 * kGiB) == kGiB);
  CHECK(grown_inflight_window(kGiB, st, 10 * kGiB) == kGiB);  // never shrinks
  // No limit (learning off), no wait, or nothing measured on the link: unchanged.
  CHECK(grown_inflight_window(kGiB, st, 0) == kGiB);
  auto quiet = st;
  quiet.forward_stall_ms = 0;  // the host waited, the GPU never ran dry
  CHECK(grown_inflight_window(kGiB, quiet, 80 * kGiB) == kGiB);
  auto unmeasured = st;
  unmeasured.d2h_seconds = 0;
  CHECK(grown_inflight_window(kGiB, unmeasured, 80 * kGiB) == kGiB);
  // Growths under 1 MiB are dropped; others are whole MiB.
  auto brief = st;
  brief.forward_stall_ms = 1e-5;  // about 0.5 KiB
  CHECK(grown_inflight_window(kGiB, brief, 80 * kGiB) == kGiB);
  brief.forward_stall_ms = 0.1;  // about 5.1 MiB
  CHECK(grown_inflight_window(kGiB, brief, 80 * kGiB) == kGiB + 5 * kMiB);
  // The options check their limit, and the offloader starts from max_inflight_bytes.
  CHECK_THROWS_WITH_AS(Offloader(sim().inflight_memory_limit(-1)),
                       doctest::Contains("inflight_memory_limit must be >= 0, got -1"), c10::Error);
  Offloader off(sim().max_inflight_bytes(3 * kMiB).inflight_memory_limit(kGiB));
  CHECK(off.inflight_window() == 3 * kMiB);
  CHECK(off.describe().find("learns") != std::string::npos);
}

TEST_CASE("policy plans: blocks:K offloads the first K stages") {
  std::vector<fno::offload::Stage> stages(6);
  for (auto& s : stages) s.chunkable = true;
  const auto plan =
      fno::offload::plan_for_policy(fno::offload::parse_policy("blocks:2"), stages, 4);
  CHECK(plan.stages[0].level == Level::kOffload);
  CHECK(plan.stages[1].level == Level::kOffload);
  CHECK(plan.stages[2].level == Level::kKeep);
  CHECK(plan.stages[5].chunks == 4);
}

TEST_CASE("the planner fits a budget at the least estimated time") {
  // A synthetic profile shaped like the seed FNO at 1024^2, batch 8 (GiB units).
  constexpr int64_t G = int64_t{1} << 30;
  fno::offload::Profile p;
  p.batch = 8;
  p.base_bytes = G / 8;
  p.grad_bytes = G / 64;
  p.d2h_gbps = p.h2d_gbps = 50;
  p.stages.push_back({"lifting", true, G / 4, G, 2 * G + G / 4, 3 * G, 3 * G, 6, 12});
  for (int i = 0; i < 4; ++i) {
    p.stages.push_back({"block." + std::to_string(i), true, G, G, 5 * G / 2, 4 * G, 4 * G, 10, 25});
  }
  p.stages.push_back({"projection", true, G, G / 32, 3 * G, 3 * G, 4 * G, 6, 14});
  const OffloadOptions o;
  const auto keep_all = fno::offload::plan_for_policy(fno::offload::parse_policy("none"),
                                                      std::vector<fno::offload::Stage>(6));
  const auto none = fno::offload::estimate(p, keep_all, o);
  CHECK(none.peak_bytes > 12 * G);
  bool fits = false;
  fno::offload::Estimate e;
  const auto roomy = fno::offload::plan_for_budget(p, 64 * G, o, &e, &fits);
  CHECK(fits);
  for (const auto& sp : roomy.stages) CHECK(sp.level == Level::kKeep);
  CHECK(e.step_ms == doctest::Approx(none.step_ms));
  const auto tight = fno::offload::plan_for_budget(p, 8 * G, o, &e, &fits);
  CHECK(fits);
  CHECK(e.peak_bytes <= 8 * G);
  CHECK(e.step_ms > none.step_ms);
  bool any_moved = false;
  for (const auto& sp : tight.stages) any_moved |= sp.level != Level::kKeep;
  CHECK(any_moved);
  fno::offload::plan_for_budget(p, G / 4, o, &e, &fits);
  CHECK_FALSE(fits);
  // A grid twice as large: activations and times double; batch, base and gradients stay.
  const auto big = p.scaled(2.0);
  CHECK(big.batch == p.batch);
  CHECK(big.base_bytes == p.base_bytes);
  CHECK(big.stages[1].saved_bytes == 2 * p.stages[1].saved_bytes);
  CHECK(big.stages[1].backward_ms == doctest::Approx(2 * p.stages[1].backward_ms));
  CHECK(p.scaled_to_batch(4).stages[1].saved_bytes * 2 == p.stages[1].saved_bytes);
  // The table names every stage.
  const auto table = p.table();
  CHECK(table.find("block.3") != std::string::npos);
}

// The seed FNO at 1024^2, batch 8, as measured on an H100 (fno_bench's auto table).
static fno::offload::Profile h100_seed_profile() {
  constexpr int64_t M = int64_t{1} << 20;
  fno::offload::Profile p;
  p.batch = 8;
  p.base_bytes = 147 * M;
  p.grad_bytes = 5 * M;
  p.stages.push_back({"lifting", true, 32 * M, 1024 * M, 2176 * M, 5216 * M, 4096 * M, 8.6, 14.6});
  for (int i = 0; i < 3; ++i) {
    p.stages.push_back({"block." + std::to_string(i), true, 1024 * M, 1024 * M, 3584 * M, 4118 * M,
                        3600 * M, 13.8, 29.0});
  }
  p.stages.push_back(
      {"block.3", true, 1024 * M, 1024 * M, 2560 * M, 4118 * M, 4619 * M, 12.3, 29.4});
  p.stages.push_back(
      {"projection", true, 1024 * M, 32 * M, 3072 * M, 4128 * M, 4096 * M, 6.3, 11.8});
  return p;
}

TEST_CASE("rank_plans: distinct level choices within the budget's slack, fastest first") {
  constexpr int64_t G = int64_t{1} << 30;
  const auto p = h100_seed_profile();
  const OffloadOptions o;
  const auto ranked = fno::offload::rank_plans(p, 8 * G, o, 6, 1.2);
  REQUIRE(ranked.size() == 6);
  std::set<std::vector<int>> seen;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const auto& [plan, e] = ranked[i];
    CHECK(e.peak_bytes <= static_cast<int64_t>(8 * G * 1.2));
    if (i > 0) CHECK(e.step_ms >= ranked[i - 1].second.step_ms);
    std::vector<int> levels;
    for (const auto& sp : plan.stages) levels.push_back(static_cast<int>(sp.level));
    CHECK(seen.insert(levels).second);
    MESSAGE(plan.to_string(std::vector<fno::offload::Stage>(6)), ": ",
            fno::offload::format_bytes(e.peak_bytes), ", ", e.step_ms, " ms");
  }
}

TEST_CASE("out-of-memory advice names the need and a policy that fits, on one line") {
  constexpr int64_t G = int64_t{1} << 30;
  const auto p = h100_seed_profile();
  const OffloadOptions o;
  const auto none = fno::offload::Policy{};
  const auto a = fno::offload::out_of_memory_advice(p, none, 16 * G, o);
  CHECK(a.capacity == 16 * G);
  CHECK(a.has_current);
  CHECK(a.current.peak_bytes > 16 * G);
  REQUIRE(a.fits);
  CHECK(static_cast<double>(a.fastest.estimate.peak_bytes) <= 0.9 * 16 * G);
  CHECK_FALSE(a.fastest.policy.is(fno::offload::Policy::Kind::kNone));
  // fno_train words it in its flags, on one line.
  fno::StepMemoryAdvice step;
  step.profiled = true;
  step.fixed = a;
  const auto advice = fno::word_memory_advice(step, none);
  MESSAGE(advice);
  CHECK(advice.find('\n') == std::string::npos);
  CHECK(advice.find("policy none needs about") == 0);
  CHECK(advice.find("the device has 16.00 GiB") != std::string::npos);
  CHECK(advice.find("try --offload " + a.fastest.policy.text) != std::string::npos);
  // auto's advice has no current estimate; nothing fits half a GiB.
  step.fixed = fno::offload::out_of_memory_advice(
      p, fno::offload::Policy::of(fno::offload::Policy::Kind::kAuto), G / 2, o);
  CHECK_FALSE(step.fixed.has_current);
  CHECK_FALSE(step.fixed.fits);
  CHECK(step.fixed.least.estimate.peak_bytes > G / 2);
  const auto hopeless = fno::word_memory_advice(step, none);
  MESSAGE(hopeless);
  CHECK(hopeless.find("no policy is estimated to fit") != std::string::npos);
  CHECK(hopeless.find("lower data.batch_size") != std::string::npos);
}

TEST_CASE("host tiles: put, expect and get round-trip, prefetched ahead; bf16 storage; limits") {
  Offloader off(sim());
  fno::offload::HostTiles tiles(off, "test tensor", /*prefetch_tiles=*/2);
  torch::manual_seed(11);
  std::vector<torch::Tensor> src;
  off.begin_step();
  for (int64_t t = 0; t < 5; ++t) {
    src.push_back(torch::randn({2, 3, t == 4 ? 2 : 4, 5}));  // a shorter last tile
    tiles.put(t, src.back());
  }
  tiles.expect({0, 1, 2, 3, 4});
  for (int64_t t = 0; t < 5; ++t) CHECK(torch::equal(tiles.get(t), src[t]));
  auto stats = off.end_step();
  const int64_t total = 2 * 3 * (4 * 4 + 2) * 5 * 4;
  CHECK(stats.bytes_offloaded == total);
  CHECK(stats.bytes_prefetched == total);  // every get was ahead of need
  CHECK(stats.bytes_fetched_on_demand == 0);
  // A get nobody announced comes on demand; a tile is read as often as asked.
  off.begin_step();
  CHECK(torch::equal(tiles.get(2), src[2]));
  CHECK(torch::equal(tiles.get(2), src[2]));
  stats = off.end_step();
  CHECK(stats.bytes_fetched_on_demand == 2 * src[2].nbytes());
  // Announced a sweep early: one tile comes before the first get, then two ahead again.
  off.begin_step();
  tiles.expect({0, 1, 2, 3, 4}, 1);
  CHECK(off.end_step().bytes_prefetched == static_cast<int64_t>(src[0].nbytes()));
  off.begin_step();
  for (int64_t t = 0; t < 5; ++t) CHECK(torch::equal(tiles.get(t), src[t]));
  stats = off.end_step();
  CHECK(stats.bytes_prefetched == total - static_cast<int64_t>(src[0].nbytes()));
  CHECK(stats.bytes_fetched_on_demand == 0);
  // Replacing a tile, and clearing.
  const auto other = torch::randn({2, 3, 4, 5});
  tiles.put(1, other);
  CHECK(torch::equal(tiles.get(1), other));
  tiles.clear();
  CHECK_THROWS_WITH(tiles.get(0), doctest::Contains("test tensor: tile 0 was never stored"));
  CHECK(tiles.host_bytes() >= total);

  // bf16 storage: half the bytes, 2^-9 relative.
  Offloader half(sim().compress(fno::offload::Compress::kBF16));
  fno::offload::HostTiles small(half, "bf16 tensor");
  half.begin_step();
  small.put(0, src[0]);
  const auto back = small.get(0);
  stats = half.end_step();
  CHECK(stats.bytes_offloaded == src[0].nbytes() / 2);
  CHECK((back.scalar_type() == torch::kFloat));
  CHECK(((back - src[0]).abs() <= src[0].abs() * std::ldexp(1.0, -8)).all().item<bool>());

  // The host memory limit: a one-line BudgetError naming the tensor and the limit.
  Offloader tight(sim().host_memory_limit(1000));
  fno::offload::HostTiles capped(tight, "block.2 input");
  const auto big = torch::randn({2, 3, 40, 5});  // 4800 bytes
  CHECK_THROWS_AS(capped.put(0, big), fno::offload::BudgetError);
  CHECK_THROWS_WITH(capped.put(0, big), doctest::Contains("block.2 input"));
  CHECK_THROWS_WITH(capped.put(0, big), doctest::Contains("host_memory_limit"));
}
