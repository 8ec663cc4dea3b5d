// The fused relative H1 loss (libfno/src/cuda/h1_loss.cu) against the LibTorch
// path (label "gpu"): the loss and its gradient in 1D, 2D and 3D, summed and
// averaged over rows, on grids with axes of one and two points, with a
// measure other than 1; bit-identical reruns; and the cases it leaves to the
// LibTorch path (a non-periodic dim, a target that needs a gradient, bf16).
#include <fno/fused.h>
#include <fno/losses.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"

using fno::test::rel_err;

namespace {

struct LossResult {
  torch::Tensor loss, dx;
};

LossResult run_h1(const fno::H1Loss& h1, const torch::Tensor& x0, const torch::Tensor& y,
                  bool fused) {
  const fno::FusedKernelsGuard guard(fused);
  const auto x = x0.detach().requires_grad_();
  auto loss = h1.rel(x, y);
  // (an upstream gradient other than 1, as a scaled or averaged loss has)
  const auto dx = torch::autograd::grad({loss}, {x}, {torch::full({}, 0.75, loss.options())})[0];
  return {loss.detach(), dx};
}

}  // namespace

TEST_CASE("fused H1 loss: the relative loss and its gradient against the LibTorch path") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(28);
  struct Case {
    std::vector<int64_t> shape;
    int64_t d;
    std::vector<double> measure;
  };
  const std::vector<Case> cases{{{4, 1, 37}, 1, {1.0}},        {{3, 2, 16, 17}, 2, {1.0}},
                                {{2, 1, 5, 6, 7}, 3, {1.0}},   {{2, 1, 1, 2}, 2, {1.0}},
                                {{3, 2, 2, 9}, 2, {2.0, 0.5}}, {{9, 10}, 2, {1.0}},
                                {{32, 1, 128, 128}, 2, {1.0}}, {{2, 3, 64, 64, 24}, 3, {1.0}},
                                {{1, 1, 1100, 1000}, 2, {1.0}}};
  for (const auto& c : cases) {
    for (const auto reduction : {fno::Reduction::kSum, fno::Reduction::kMean}) {
      const fno::H1Loss h1(fno::H1LossOptions().d(c.d).measure(c.measure).reduction(reduction));
      const auto y = torch::randn(c.shape, o);
      const auto x = (y + 0.3 * torch::randn(c.shape, o));
      const auto lib = run_h1(h1, x, y, false);
      const auto got = run_h1(h1, x, y, true);
      const double el = (got.loss - lib.loss).abs().item<double>() / lib.loss.abs().item<double>();
      const double eg = rel_err(got.dx, lib.dx);
      INFO("shape ", torch::IntArrayRef(c.shape), " d ", c.d, " mean ",
           reduction == fno::Reduction::kMean, ": loss ", el, ", gradient ", eg);
      MESSAGE("H1 ", torch::IntArrayRef(c.shape), " d ", c.d,
              reduction == fno::Reduction::kMean ? " mean" : " sum", ": loss ",
              got.loss.item<double>(), " (", el, "), gradient ", eg);
      CHECK((got.loss.dim() == 0 && got.loss.scalar_type() == torch::kFloat));
      CHECK(el <= 1e-5);
      CHECK((got.dx.sizes() == x.sizes()));
      CHECK(eg <= 1e-5);
      // Fixed-order sums: a second run gives the same bits.
      const auto again = run_h1(h1, x, y, true);
      CHECK(torch::equal(again.loss, got.loss));
      CHECK(torch::equal(again.dx, got.dx));
    }
  }
  // A prediction equal to the target: the loss is 0 and its gradient 0 (the
  // LibTorch path's chain gives 0 * inf = NaN there).
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const auto y = torch::randn({2, 1, 8, 8}, o);
  const auto same = run_h1(h1, y, y, true);
  CHECK(same.loss.item<double>() == 0.0);
  CHECK(same.dx.abs().max().item<double>() == 0.0);
}

TEST_CASE("fused H1 loss: what it leaves to the LibTorch path gives the LibTorch numbers") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(29);
  const auto y = torch::randn({3, 1, 12, 13}, o), x = y + 0.2 * torch::randn({3, 1, 12, 13}, o);
  SUBCASE("a non-periodic dim") {
    const fno::H1Loss h1(fno::H1LossOptions().d(2).periodic_in_y(false));
    const auto lib = run_h1(h1, x, y, false), got = run_h1(h1, x, y, true);
    CHECK(torch::equal(lib.loss, got.loss));
    CHECK(torch::equal(lib.dx, got.dx));
  }
  SUBCASE("bf16 inputs") {
    const fno::H1Loss h1(fno::H1LossOptions().d(2));
    const auto xb = x.to(torch::kBFloat16), yb = y.to(torch::kBFloat16);
    const auto lib = run_h1(h1, xb, yb, false), got = run_h1(h1, xb, yb, true);
    CHECK(torch::equal(lib.loss, got.loss));
    CHECK(torch::equal(lib.dx, got.dx));
  }
  SUBCASE("a target that needs a gradient") {
    const fno::H1Loss h1(fno::H1LossOptions().d(2));
    std::vector<torch::Tensor> grads[2];
    for (const bool fused : {false, true}) {
      const fno::FusedKernelsGuard guard(fused);
      const auto xr = x.detach().requires_grad_(), yr = y.detach().requires_grad_();
      grads[fused] = torch::autograd::grad({h1.rel(xr, yr)}, {xr, yr});
    }
    CHECK(torch::equal(grads[0][0], grads[1][0]));
    CHECK(torch::equal(grads[0][1], grads[1][1]));
  }
}
