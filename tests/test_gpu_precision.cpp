// Mixed precision on the GPU (label "gpu"): tf32, bf16 and fp16 steps of the
// seed FNO against fp32 at even and odd grids; every offload policy in bf16
// against the plain fp32 step, storing half the bytes; the peak memory of a
// bf16 step; the loss scaler's CUDA kernels on a planted inf.
#include <fno/fno.h>
#include <fno/layers.h>
#include <fno/precision.h>
#include <fno/serialize.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <limits>

#include "golden.h"
#include "offload_check.h"

using fno::offload::Offloader;
using fno::offload::OffloadOptions;
using fno::test::golden_path;
using fno::test::rel_err;
using fno::test::run_step;

namespace {

struct Tolerance {
  double forward, grad;
};
// The CPU test's bounds (test_precision.cpp); tf32 rounds GEMM inputs to
// fp16's 10-bit mantissa, and gets fp16's bounds.
Tolerance tolerance(fno::Precision p) {
  return p == fno::Precision::kBF16 ? Tolerance{2e-2, 3e-2} : Tolerance{2.5e-3, 4e-3};
}

fno::FNO seed_model() {
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2));
  fno::load_state_dict(*model, fno::load_tensor_dict(golden_path("seed_state.pt")));
  model->to(torch::kCUDA);
  return model;
}

}  // namespace

TEST_CASE("GPU: tf32, bf16 and fp16 steps follow fp32 at 64^2, 85^2 and 421^2, both memory levels") {
  auto model = seed_model();
  for (const int64_t n : {64, 85, 421}) {
    torch::manual_seed(5);
    const auto x = torch::randn({4, 1, n, n}, torch::kCUDA);
    const auto w = torch::rand({4, 1, n, n}, torch::kCUDA);
    const auto ref = run_step(model, x, w, nullptr, nullptr);
    for (const bool slim : {false, true}) {
      for (const auto p : {fno::Precision::kTF32, fno::Precision::kBF16, fno::Precision::kFP16}) {
        INFO("grid ", n, ", slim ", slim, ", precision ", fno::to_string(p));
        const fno::MatmulPrecisionGuard matmul(p);
        model->options.compute_dtype(fno::compute_dtype(p));
        std::optional<fno::RecomputeCheapGuard> cheap;
        if (slim) cheap.emplace();
        const auto got = run_step(model, x, w, nullptr, nullptr);
        cheap.reset();
        model->options.compute_dtype(torch::kFloat);
        CHECK((got.output.scalar_type() == torch::kFloat));
        const double e_out = rel_err(got.output, ref.output);
        double e_grad = 0;
        for (const auto& kv : ref.grads) {
          CHECK((got.grads.at(kv.first).scalar_type() == kv.second.scalar_type()));
          e_grad = std::max(e_grad, rel_err(got.grads.at(kv.first), kv.second));
        }
        MESSAGE("grid ", n, ", slim ", slim, ", ", fno::to_string(p), ": output ", e_out,
                ", worst gradient ", e_grad);
        CHECK(e_out > 0);
        CHECK(e_out <= tolerance(p).forward);
        CHECK(e_grad <= tolerance(p).grad);
      }
    }
  }
}

TEST_CASE("GPU: in bf16 and fp16 every offload policy follows fp32 and moves half the bytes") {
  torch::manual_seed(3);
  fno::FNO model(fno::FNOOptions({8, 6}, 1, 1, 16).n_layers(3).domain_padding({0.125}));
  model->to(torch::kCUDA);
  const auto x = torch::randn({4, 1, 48, 37}, torch::kCUDA);
  const auto w = torch::rand_like(model->forward(x).detach());
  const auto ref = run_step(model, x, w, nullptr, nullptr);
  const auto stages = fno::fno_stages(model, x.sizes().slice(2).vec());
  for (const std::string policy : {"all", "blocks:2", "recompute+offload"}) {
    int64_t moved_fp32 = 0;
    for (const auto p : {fno::Precision::kFP32, fno::Precision::kBF16, fno::Precision::kFP16}) {
      INFO("policy ", policy, ", precision ", fno::to_string(p));
      model->options.compute_dtype(fno::compute_dtype(p));
      Offloader off(
          OffloadOptions().min_bytes(0).max_inflight_bytes(1 << 16).max_prefetch_bytes(1 << 18));
      off.exclude(*model);
      const auto plan =
          fno::offload::plan_for_policy(fno::offload::parse_policy(policy), stages, 2);
      for (int rep = 0; rep < 2; ++rep) {
        const auto got = run_step(model, x, w, &plan, &off);
        const double tol = p == fno::Precision::kFP32 ? 1e-5 : tolerance(p).grad;
        CHECK(rel_err(got.output, ref.output) <= tol);
        for (const auto& kv : ref.grads) {
          const auto& name = kv.first;
          INFO("gradient of ", name);
          CHECK(rel_err(got.grads.at(name), kv.second) <= tol);
        }
        if (p == fno::Precision::kFP32) {
          moved_fp32 = got.stats.bytes_offloaded;
        } else {
          CHECK(got.stats.bytes_offloaded <= 0.55 * static_cast<double>(moved_fp32));
        }
      }
      model->options.compute_dtype(torch::kFloat);
    }
  }
}

TEST_CASE("GPU: a bf16 step of the seed FNO peaks at about half of fp32's memory") {
  auto model = seed_model();
  const auto x = torch::randn({4, 1, 256, 256}, torch::kCUDA);
  const auto w = torch::rand({4, 1, 256, 256}, torch::kCUDA);
  std::map<std::string, int64_t> peak;
  for (const auto p : {fno::Precision::kFP32, fno::Precision::kBF16}) {
    model->options.compute_dtype(fno::compute_dtype(p));
    run_step(model, x, w, nullptr, nullptr);  // warm-up
    for (auto& q : model->parameters()) q.mutable_grad() = torch::Tensor();
    c10::cuda::CUDACachingAllocator::emptyCache();
    const int64_t before =
        c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    run_step(model, x, w, nullptr, nullptr);
    peak[fno::to_string(p)] =
        c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak - before;
    model->options.compute_dtype(torch::kFloat);
  }
  MESSAGE("step peak above the resident state, 4 x 256^2: fp32 ", peak["fp32"], " B, bf16 ",
          peak["bf16"], " B");
  CHECK(peak["bf16"] <= 0.6 * static_cast<double>(peak["fp32"]));
}

TEST_CASE("GPU: the loss scaler finds an inf in a complex gradient and backs off") {
  auto w = torch::zeros({1000}, torch::TensorOptions().device(torch::kCUDA).requires_grad(true));
  auto c = torch::zeros(
      {4, 3},
      torch::TensorOptions().dtype(torch::kComplexFloat).device(torch::kCUDA).requires_grad(true));
  fno::GradScaler scaler(fno::GradScalerOptions().init_scale(256.0), torch::kCUDA);
  w.mutable_grad() = torch::full({1000}, 512.0f, torch::kCUDA);
  c.mutable_grad() = torch::full({4, 3}, 256.0f, torch::kCUDA).to(torch::kComplexFloat) *
                     c10::complex<float>(1, -2);
  CHECK(scaler.unscale({w, c}));
  CHECK(torch::allclose(w.grad().cpu(), torch::full({1000}, 2.0f)));
  CHECK(torch::allclose(torch::imag(c.grad()).cpu(), torch::full({4, 3}, -2.0f)));
  scaler.update();
  CHECK(scaler.scale_value() == 256.0);
  c.mutable_grad().view({-1})[7] = c10::complex<float>(0, std::numeric_limits<float>::infinity());
  CHECK_FALSE(scaler.unscale({w, c}));
  scaler.update();
  CHECK(scaler.scale_value() == 128.0);
  CHECK(scaler.skipped_steps() == 1);
}
