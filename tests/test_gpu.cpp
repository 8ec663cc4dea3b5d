// GPU tests (CTest label "gpu"). Without a CUDA device the program prints why
// and exits 77, which CTest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/optim.h>
#include <fno/serialize.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "golden.h"

using fno::test::golden_path;
using fno::test::golden_tensor;
using fno::test::rel_err;

namespace {

fno::FNO seed_model() {
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2));
  fno::load_state_dict(*model, fno::load_tensor_dict(golden_path("seed_state.pt")));
  return model;
}

}  // namespace

TEST_CASE("CUDA forward and gradients match neuraloperator's golden values (cuFFT path)") {
  for (const std::string io : {"seed_io.pt", "seed_odd_io.pt"}) {
    INFO("case ", io);
    auto model = seed_model();
    model->to(torch::kCUDA);
    auto x = golden_tensor(io, "x").to(torch::kCUDA);
    auto y = model->forward(x);
    CHECK(y.is_cuda());
    CHECK(rel_err(y, golden_tensor(io, "y")) <= 1e-5);
    (y * golden_tensor(io, "w").to(torch::kCUDA)).sum().backward();
    for (const auto& p : model->named_parameters()) {
      INFO("gradient of ", p.key());
      CHECK(rel_err(p.value().grad(), golden_tensor(io, "grad." + p.key())) <= 1e-4);
    }
  }
}

TEST_CASE("CUDA: blocks without channel MLPs match neuraloperator's golden values") {
  const std::string io = "fno2d_no_channel_mlp_io.pt";
  fno::FNO model(fno::FNOOptions({8, 6}, 1, 2, 8).n_layers(3).use_channel_mlp(false));
  fno::load_state_dict(*model, fno::load_tensor_dict(golden_path("fno2d_no_channel_mlp_state.pt")));
  model->to(torch::kCUDA);
  auto y = model->forward(golden_tensor(io, "x").to(torch::kCUDA));
  CHECK(rel_err(y, golden_tensor(io, "y")) <= 1e-5);
  (y * golden_tensor(io, "w").to(torch::kCUDA)).sum().backward();
  for (const auto& p : model->named_parameters()) {
    INFO("gradient of ", p.key());
    CHECK(rel_err(p.value().grad(), golden_tensor(io, "grad." + p.key())) <= 1e-4);
  }
}

TEST_CASE("CUDA and CPU agree for 1D, 2D and 3D models at odd sizes") {
  torch::manual_seed(0);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{8}, {4, 2, 37}}, {{8, 8}, {2, 2, 17, 23}}, {{4, 4, 4}, {1, 2, 9, 7, 5}}};
  for (const auto& c : cases) {
    const auto& modes = c.first;  // (no structured binding: clang 14 cannot capture one in INFO)
    const auto& shape = c.second;
    INFO("input shape ", torch::IntArrayRef(shape));
    fno::FNO cpu(fno::FNOOptions(modes, 2, 1, 8).n_layers(2));
    auto gpu = std::dynamic_pointer_cast<fno::FNOImpl>(cpu->clone(torch::kCUDA));
    auto x = torch::randn(shape);
    auto yc = cpu->forward(x);
    auto yg = gpu->forward(x.to(torch::kCUDA));
    CHECK(rel_err(yg, yc) <= 1e-5);
    fno::H1Loss loss(fno::H1LossOptions().d(static_cast<int64_t>(modes.size())));
    auto target = torch::randn_like(yc);
    loss(yc, target).backward();
    loss(yg, target.to(torch::kCUDA)).backward();
    auto pc = cpu->named_parameters();
    auto pg = gpu->named_parameters();
    // Each parameter's gradient error is measured against its own norm, or
    // against 5e-2 of the whole gradient's norm when its own is smaller: a
    // bias gradient that is a sum of many cancelling terms (the projection's
    // last bias, ~1e-3 of the total) carries float32 rounding of the terms'
    // scale, not of its own, and CPU and GPU sum in different orders.
    double total = 0;
    for (const auto& item : pc) total += item.value().grad().abs().pow(2).sum().item<double>();
    const double floor = 5e-2 * std::sqrt(total);
    for (const auto& item : pc) {
      const auto& gc = item.value().grad();
      const double diff = (pg[item.key()].grad().cpu() - gc).abs().pow(2).sum().sqrt().item<double>();
      const double scale = std::max(gc.abs().pow(2).sum().sqrt().item<double>(), floor);
      INFO("gradient of ", item.key(), ": error ", diff, ", scale ", scale);
      CHECK(diff / scale <= 1e-4);
    }
  }
}

TEST_CASE("AdamW steps on CUDA equal CPU steps") {
  torch::manual_seed(1);
  auto pc = torch::randn({16, 8}, torch::kComplexFloat).requires_grad_(true);
  auto pg = pc.detach().to(torch::kCUDA).requires_grad_(true);
  fno::AdamW oc({pc}, fno::AdamWOptions(1e-2).weight_decay(1e-4));
  fno::AdamW og({pg}, fno::AdamWOptions(1e-2).weight_decay(1e-4));
  for (int i = 0; i < 10; ++i) {
    auto g = torch::randn({16, 8}, torch::kComplexFloat);
    pc.mutable_grad() = g;
    pg.mutable_grad() = g.to(torch::kCUDA);
    oc.step();
    og.step();
  }
  CHECK(rel_err(pg, pc) <= 1e-6);
}

namespace {

/// The cuBLAS and cuBLASLt workspaces LibTorch keeps, one per (handle, stream)
/// that ran a product, until clearCublasWorkspaces(): their count and bytes.
std::pair<size_t, size_t> cublas_workspaces() {
  auto& blas = at::cuda::cublas_handle_stream_to_workspace();
  auto& lt = at::cuda::cublaslt_handle_stream_to_workspace();
  const std::shared_lock<std::shared_mutex> blas_lock(blas.mutex);
  const std::shared_lock<std::shared_mutex> lt_lock(lt.mutex);
  return {blas.map.size() + lt.map.size(),
          blas.map.size() * at::cuda::getChosenWorkspaceSize() +
              lt.map.size() * at::cuda::getCUDABlasLtWorkspaceSize()};
}

/// With FNO_TEST_CUDA_MEMORY set, one line after each test case: the bytes the
/// caching allocator still holds for live tensors once its cache is emptied
/// (and how many of them are cuBLAS workspaces), what it reserves, and what the
/// device has in use (context and libraries included), to find a test that
/// leaves memory behind.
struct CudaMemoryListener : doctest::IReporter {
  explicit CudaMemoryListener(const doctest::ContextOptions& /*options*/)
      : on_(std::getenv("FNO_TEST_CUDA_MEMORY") != nullptr) {}
  void test_case_start(const doctest::TestCaseData& data) override { name_ = data.m_name; }
  void test_case_end(const doctest::CurrentTestCaseStats& /*stats*/) override {
    if (!on_) return;
    namespace alloc = c10::cuda::CUDACachingAllocator;
    alloc::emptyCache();
    const auto stats = alloc::getDeviceStats(c10::cuda::current_device());
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    const auto [workspaces, workspace_bytes] = cublas_workspaces();
    constexpr double kMiB = 1 << 20;
    std::cout << "[cuda memory] allocated " << stats.allocated_bytes[0].current / kMiB << " MiB ("
              << workspaces << " cuBLAS workspaces, " << workspace_bytes / kMiB
              << " MiB), reserved " << stats.reserved_bytes[0].current / kMiB
              << " MiB, device in use " << (total - free) / kMiB << " MiB after: " << name_
              << std::endl;
  }
  void report_query(const doctest::QueryData& /*data*/) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& /*stats*/) override {}
  void test_case_reenter(const doctest::TestCaseData& /*data*/) override {}
  void test_case_exception(const doctest::TestCaseException& /*e*/) override {}
  void subcase_start(const doctest::SubcaseSignature& /*signature*/) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& /*data*/) override {}
  void log_message(const doctest::MessageData& /*data*/) override {}
  void test_case_skipped(const doctest::TestCaseData& /*data*/) override {}

 private:
  bool on_;
  const char* name_ = "";
};

REGISTER_LISTENER("cuda_memory", 1, CudaMemoryListener);

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::cout << "fno_gpu_tests: no CUDA device visible; skipping the GPU tests\n";
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
