// Gradients exact at every grid (label "gpu"; docs/parity.md): one training
// step of the seed FNO in fp32, with the fused kernels and without them, whole
// grid, under recompute and in auto's tiles, against a float64 copy of the
// model run sample by sample; each parameter tensor's error
// ||g - g64|| / ||g64||. Also: the output biases' gradients under an upstream
// gradient of ones equal their point count past 2^31 elements, and every
// inverse real transform reads its spectrum as Hermitian (zero imaginary parts
// at the zero and Nyquist modes) at n = 8192 and 16384.
//
// The "parity |" lines are docs/parity.md's table (FNO_TEST_PARITY_SWEEP=1
// adds the grid sweep behind it).
#include <fno/fno.h>
#include <fno/fused.h>
#include <fno/layers.h>
#include <fno/losses.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno/tiled.h>
#include <fno_engine/offload_step.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../libfno/src/spectral.h"  // (internal to libfno: the last dim's inverse)
#include "golden.h"
#include "grad_check.h"

using fno::test::Grads;
using fno::test::rel_err;

namespace {

using Loss = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

void free_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

// The seed FNO (2D: neuraloperator's seed state; 3D: modes 8^3, seeded).
fno::FNO seed_model(int dims) {
  torch::manual_seed(41);
  const std::vector<int64_t> modes(static_cast<size_t>(dims), dims == 2 ? 16 : 8);
  fno::FNO model(fno::FNOOptions(modes, 1, 1, 32).projection_channel_ratio(2));
  if (dims == 2) {
    fno::load_state_dict(*model, fno::load_tensor_dict(fno::test::golden_path("seed_state.pt")));
  }
  model->to(torch::kCUDA);
  return model;
}

// A Darcy-like problem: x a white-noise field [B, 1, *S], y smooth as PDE
// solutions are (1 + 0.5 sin(2 pi r) cos(4 pi c) on each 2D slice, a phase
// per sample).
struct Problem {
  at::Tensor x, y;
  int dims = 2;
  int64_t points() const { return x.numel(); }
};

// `noise` > 0 adds white noise of that size to y (a rough target, whose H1
// loss gradient is dominated by its finite differences: sums of large terms
// that cancel).
Problem make_problem(int64_t batch, std::vector<int64_t> grid, uint64_t seed, double noise = 0) {
  torch::manual_seed(seed);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  std::vector<int64_t> shape{batch, 1};
  shape.insert(shape.end(), grid.begin(), grid.end());
  Problem p;
  p.dims = static_cast<int>(grid.size());
  p.x = torch::randn(shape, o);
  const int64_t nr = grid[grid.size() - 2], nc = grid.back();
  const auto r = torch::linspace(0, 1, nr, o).view({1, 1, -1, 1});
  const auto c = torch::linspace(0, 1, nc, o).view({1, 1, 1, -1});
  const auto phase = torch::arange(batch, o).view({-1, 1, 1, 1}) * 0.7;
  auto y2 = 1 + 0.5 * torch::sin(2 * M_PI * r + phase) * torch::cos(4 * M_PI * c);  // [B,1,R,C]
  if (p.dims == 3) {
    const auto d = torch::linspace(0, 1, grid[0], o).view({1, 1, -1, 1, 1});
    p.y = (y2.unsqueeze(2) * (1 + 0.25 * torch::cos(2 * M_PI * d))).expand(shape).contiguous();
  } else {
    p.y = y2.expand(shape).contiguous();
  }
  if (noise > 0) p.y = p.y + noise * torch::randn(shape, o);
  return p;
}

Loss h1_loss(int dims) {
  const fno::H1Loss h1(fno::H1LossOptions().d(dims));
  return [h1](const at::Tensor& out, const at::Tensor& y) { return h1(out, y); };
}

// The float64 truth: a float64 copy of the model, one sample at a time
// (whole grid, or in tiles of `tile_rows` rows with every block input on the
// GPU, where a whole-grid float64 sample would not fit), gradients summed over
// the samples as the summed loss's are.
Grads float64_reference(fno::FNO& model, const Problem& p, const Loss& loss,
                        int64_t tile_rows = 0) {
  auto copy = std::dynamic_pointer_cast<fno::FNOImpl>(model->clone());
  {
    torch::NoGradGuard no_grad;
    for (auto& t : copy->parameters()) {
      t.set_data(t.is_complex() ? t.to(torch::kComplexDouble) : t.to(torch::kDouble));
    }
  }
  fno::FNO m64(copy);
  m64->zero_grad(true);
  Grads g;
  double total = 0;
  for (int64_t b = 0; b < p.x.size(0); ++b) {
    const auto xb = p.x.narrow(0, b, 1).to(torch::kDouble);
    const auto yb = p.y.narrow(0, b, 1).to(torch::kDouble);
    if (tile_rows > 0) {
      fno::TiledPlan plan;
      plan.tile_rows = tile_rows;
      fno::TiledStep step(m64, plan);
      total += step.forward_backward(xb, yb, loss).item<double>();
    } else {
      auto l = loss(m64->forward(xb), yb);
      l.backward();
      total += l.item<double>();
    }
    free_cache();
  }
  g.loss = torch::tensor(total, torch::kDouble);
  for (const auto& t : m64->named_parameters()) g.grads[t.key()] = t.value().grad().clone();
  return g;
}

// How one fp32 step computes: the whole grid, or an OffloadedStep's policy
// (with auto's budget).
struct Path {
  std::string policy = "none";
  int64_t budget = 0;
  bool fused = true;
  fno::Precision precision = fno::Precision::kFP32;
  std::string name() const {
    std::string s = policy == "none" ? "whole grid" : policy;
    if (budget > 0) s += " under " + std::to_string(budget >> 20) + " MiB";
    if (precision != fno::Precision::kFP32) s += ", " + fno::to_string(precision);
    return s + (fused ? ", fused kernels" : ", LibTorch path");
  }
};

// One step in the path's precision (bf16 and fp16: activations in that type,
// the fp16 loss scaled by 2^16 as its scaler would, and the gradients unscaled).
Grads fp32_step(fno::FNO& model, const Problem& p, const Loss& loss, const Path& path,
                std::string* plan = nullptr) {
  const fno::FusedKernelsGuard fused(path.fused);
  free_cache();
  if (path.precision != fno::Precision::kFP32) {
    const fno::MatmulPrecisionGuard matmul(path.precision);
    const double scale = path.precision == fno::Precision::kFP16 ? 65536.0 : 1.0;
    model->options.compute_dtype(fno::compute_dtype(path.precision));
    auto g = fno::test::run(model, [&] {
      auto l = loss(model->forward(p.x), p.y) * scale;
      l.backward();
      return l.detach() / scale;
    });
    model->options.compute_dtype(torch::kFloat);
    for (auto& [name, t] : g.grads) t = t / scale;
    return g;
  }
  if (path.policy == "none") {
    return fno::test::run(model, [&] {
      auto l = loss(model->forward(p.x), p.y);
      l.backward();
      return l.detach();
    });
  }
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy(path.policy);
  settings.gpu_memory_limit = path.budget;
  fno::OffloadedStep step(model, settings);
  auto g = fno::test::run(model, [&] { return step.forward_backward(p.x, p.y, loss, false); });
  if (plan != nullptr) *plan = step.plan_text();
  return g;
}

struct Worst {
  std::string name;
  double err = 0;
};

// Each tensor's error against float64; the worst one.
Worst worst_tensor(const Grads& got, const Grads& f64) {
  Worst w;
  for (const auto& [name, g] : f64.grads) {
    const double e = rel_err(got.grads.at(name), g);
    if (e >= w.err) w = {name, e};
  }
  return w;
}

// One line of docs/parity.md's table, and the checks: every tensor within `limit`.
void report(const std::string& grid, const Path& path, const Grads& got, const Grads& f64,
            double limit) {
  const auto w = worst_tensor(got, f64);
  MESSAGE("parity | ", grid, " | ", path.name(), " | ", w.name, " | ", w.err, " | loss ",
          rel_err(got.loss.to(torch::kDouble).cpu(), f64.loss));
  for (const auto& [name, g] : f64.grads) {
    INFO(grid, ", ", path.name(), ": gradient of ", name);
    CHECK(rel_err(got.grads.at(name), g) <= limit);
  }
}

std::string grid_text(const Problem& p) {
  std::ostringstream s;
  s << p.x.size(0) << " x ";
  for (int64_t d = 2; d < p.x.dim(); ++d) s << (d > 2 ? "x" : "") << p.x.size(d);
  return s.str();
}

size_t free_bytes() {
  free_cache();
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

}  // namespace

TEST_CASE("parity: fp32 gradients against float64, 2048^2, batch 8, whole grid") {
  REQUIRE(fno::fused_kernels_compiled());
  auto model = seed_model(2);
  const auto p = make_problem(8, {2048, 2048}, 1);
  const auto loss = h1_loss(2);
  const auto f64 = float64_reference(model, p, loss);
  for (const bool fused : {true, false}) {
    Path path;
    path.fused = fused;
    // (the LibTorch path's whole-grid step needs more than 80 GB here: recompute)
    if (!fused) path.policy = "recompute";
    report(grid_text(p), path, fp32_step(model, p, loss, path), f64, 1e-4);
  }
  // bf16 and fp16 (the fused kernels), within docs/precision.md's tolerances
  // for a step's worst gradient tensor against float64 at this grid: 2e-2 and
  // 1.5e-3 (measured 1.55e-2 and 1.03e-3: the activations' own rounding, which
  // the small grids' 1e-2 and 8e-4 against fp32 leave a little short of).
  for (const auto precision : {fno::Precision::kBF16, fno::Precision::kFP16}) {
    Path path;
    path.precision = precision;
    report(grid_text(p), path, fp32_step(model, p, loss, path), f64,
           precision == fno::Precision::kBF16 ? 2e-2 : 1.5e-3);
  }
}

TEST_CASE("parity: fp32 gradients against float64, 6 x 2400^2 (a tensor past 2^31 elements)") {
  REQUIRE(fno::fused_kernels_compiled());
  if (free_bytes() < (size_t{60} << 30)) {
    MESSAGE("skipped: needs 60 GiB of free GPU memory");
    return;
  }
  auto model = seed_model(2);
  // hidden [6, 32, 2400, 2400]: 1.1e9 elements ... A rough target (1% white
  // noise), whose H1 gradient's sums cancel the most: the fused kernels'
  // serial fp32 sums drifted to 3.1e-5 on it at 8 x 2048^2 (docs/parity.md).
  const auto p = make_problem(6, {2400, 2400}, 2, 0.01);
  const auto loss = h1_loss(2);
  const auto f64 = float64_reference(model, p, loss);
  for (const bool fused : {true, false}) {
    Path path;
    path.policy = "recompute";
    path.fused = fused;
    // ... the projection's hidden layer [6, 64, 2400, 2400] is 2.2e9 elements
    report(grid_text(p), path, fp32_step(model, p, loss, path), f64, 3e-5);
  }
}

TEST_CASE("parity: fp32 gradients against float64, 4096^2, batch 2, auto's tiles under 4 GiB") {
  REQUIRE(fno::fused_kernels_compiled());
  if (free_bytes() < (size_t{40} << 30)) {
    MESSAGE("skipped: needs 40 GiB of free GPU memory");
    return;
  }
  auto model = seed_model(2);
  const auto p = make_problem(2, {4096, 4096}, 3);
  const auto loss = h1_loss(2);
  const auto f64 = float64_reference(model, p, loss, /*tile_rows=*/512);
  Path path;
  path.policy = "auto";
  path.budget = int64_t{4} << 30;
  std::string plan;
  const auto got = fp32_step(model, p, loss, path, &plan);
  MESSAGE("auto's plan: ", plan);
  CHECK(plan.rfind("tiled ", 0) == 0);
  report(grid_text(p), path, got, f64, 1e-4);
}

TEST_CASE("parity: fp32 gradients against float64, 3D 160^3, batch 2, whole grid") {
  REQUIRE(fno::fused_kernels_compiled());
  auto model = seed_model(3);
  const auto p = make_problem(2, {160, 160, 160}, 4);
  const auto loss = h1_loss(3);
  const auto f64 = float64_reference(model, p, loss);
  for (const bool fused : {true, false}) {
    Path path;
    path.fused = fused;
    report(grid_text(p), path, fp32_step(model, p, loss, path), f64, 1e-4);
  }
}

TEST_CASE("parity: the grid sweep behind docs/parity.md (FNO_TEST_PARITY_SWEEP=1)") {
  const char* on = std::getenv("FNO_TEST_PARITY_SWEEP");
  if (on == nullptr || std::string(on) != "1") return;
  auto model = seed_model(2);
  const auto loss = h1_loss(2);
  for (const double noise : {0.0, 0.01}) {
    for (const int64_t n : {256, 512, 1024, 1536, 2048}) {
      const auto p = make_problem(8, {n, n}, 5, noise);
      const auto f64 = float64_reference(model, p, loss);
      for (const bool fused : {true, false}) {
        Path path;
        path.fused = fused;
        path.policy = "recompute";
        const auto got = fp32_step(model, p, loss, path);
        const auto w = worst_tensor(got, f64);
        MESSAGE("parity sweep | target noise ", noise, " | ", grid_text(p), " | ", path.name(),
                " | ", w.name, " | ", w.err);
      }
    }
  }
}

TEST_CASE("parity: output-bias gradients under ones equal the point count past 2^31 elements") {
  REQUIRE(fno::fused_kernels_compiled());
  if (free_bytes() < (size_t{40} << 30)) {
    MESSAGE("skipped: needs 40 GiB of free GPU memory");
    return;
  }
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(42);
  // [1, 32, 8256, 8192]: 2.16e9 elements, 67.6e6 points.
  const int64_t rows = 8256, cols = 8192, points = rows * cols;
  const auto x = torch::randn({1, 32, rows, cols}, o);
  // The projection (32 -> 64 -> 1) on the fused channel MLP: d b2 = sum of ones.
  {
    const auto u = [&](std::vector<int64_t> s, double bound) {
      return (torch::rand(s, o) * 2 - 1).mul_(bound).requires_grad_();
    };
    const auto w1 = u({64, 32, 1}, 0.17), b1 = u({64}, 0.5), w2 = u({1, 64, 1}, 0.125),
               b2 = u({1}, 0.5);
    auto y = fno::channel_mlp2(x, w1, b1, w2, b2, /*gelu_input=*/false);
    y.backward(torch::ones_like(y));
    const double got = b2.grad().item<double>();
    MESSAGE("projection b2's gradient under ones: ", got, " (points ", points, ")");
    CHECK(std::abs(got - static_cast<double>(points)) <= 1e-6 * static_cast<double>(points));
  }
  free_cache();
  // A block's fused tail (one block of width 32, the last: no GELU after its
  // channel MLP): the MLP's output bias, channel_mlp.0.fcs.1.bias, gets the
  // sum of ones over every point in each channel.
  {
    fno::FNOBlocks blocks(fno::FNOBlocksOptions(32, {16, 16}).n_layers(1));
    blocks->to(torch::kCUDA);
    auto y = blocks->forward(x, 0);
    y.backward(torch::ones_like(y));
    const auto g = blocks->named_parameters()["channel_mlp.0.fcs.1.bias"].grad();
    REQUIRE(g.defined());
    const double err =
        (g.to(torch::kDouble).cpu() - static_cast<double>(points)).abs().max().item<double>() /
        static_cast<double>(points);
    MESSAGE("block tail b2's gradient under ones: worst relative error ", err);
    CHECK(err <= 1e-6);
  }
}

TEST_CASE("parity: inverse real transforms read the spectrum as Hermitian (n = 8192, 16384)") {
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(43);
  for (const int64_t n : {8192, 16384}) {
    // Every kept count: the GEMM's (9) and cuFFT's (64, and n/2 + 1 with the
    // Nyquist mode), each on a spectrum with imaginary zero and Nyquist parts.
    for (const int64_t k : {int64_t{9}, int64_t{64}, n / 2 + 1}) {
      const auto modes = torch::randn({4, k}, o.dtype(torch::kComplexFloat));
      fno::detail::SpectralModes m;
      m.spatial = {n};
      m.kept = {k};
      m.gemm = k <= fno::detail::kMaxDftGemmModes;
      if (m.gemm) m.dft = fno::detail::real_dft(n, k, o.dtype(torch::kFloat));
      const auto got = fno::detail::last_dim_inverse(m, modes, torch::kFloat);
      // numpy's irfft (pocketfft on the CPU, float64): the imaginary parts of
      // the zero and Nyquist modes are dropped.
      const auto ref = torch::fft::irfft(modes.cpu().to(torch::kComplexDouble), n, -1, "forward");
      const double e = rel_err(got, ref);
      MESSAGE("irfft n = ", n, ", ", k, " modes (", std::string(m.gemm ? "GEMM" : "cuFFT"),
              "): ", e);
      CHECK(e <= 1e-6);
    }
  }
  // The whole-grid forward of a spectral convolution at 8192^2 and 16384^2
  // against float64, on both paths of its last dim (9 kept: the GEMM; 100
  // kept: cuFFT).
  for (const int64_t n : {8192, 16384}) {
    for (const int64_t modes : {16, 200}) {
      torch::manual_seed(44);
      fno::SpectralConv conv(fno::SpectralConvOptions(2, 2, {modes, modes}));
      conv->to(torch::kCUDA);
      const auto x = torch::randn({1, 2, n, n}, o);
      at::Tensor y;
      {
        torch::NoGradGuard no_grad;
        y = conv->forward(x);
      }
      auto c64 = std::dynamic_pointer_cast<fno::SpectralConvImpl>(conv->clone());
      {
        torch::NoGradGuard no_grad;
        for (auto& t : c64->parameters()) {
          t.set_data(t.is_complex() ? t.to(torch::kComplexDouble) : t.to(torch::kDouble));
        }
      }
      at::Tensor y64;
      {
        torch::NoGradGuard no_grad;
        y64 = c64->forward(x.to(torch::kDouble));
      }
      const double e = rel_err(y, y64);
      MESSAGE("spectral conv ", n, "^2, modes ", modes, ": forward against float64 ", e);
      CHECK(e <= 1e-6);
      free_cache();
    }
  }
}
