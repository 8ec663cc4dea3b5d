// LpLoss and H1Loss against neuraloperator 2.0.0 (golden file losses.pt, float64).
#include <fno/losses.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"

using fno::test::golden_tensor;
using fno::test::rel_err;

namespace {

constexpr double kTol = 1e-6;
const char* kFile = "losses.pt";

void check_value(const torch::Tensor& ours, const std::string& key) {
  const auto ref = golden_tensor(kFile, key);
  const double e = rel_err(ours, ref);
  INFO(key, ": ours ", ours.item<double>(), " reference ", ref.item<double>());
  CHECK(e <= kTol);
}

void check_grad(const torch::Tensor& x, const std::string& key) {
  const double e = rel_err(x.grad(), golden_tensor(kFile, key));
  INFO(key, ": relative error ", e);
  CHECK(e <= kTol);
}

struct Inputs {
  torch::Tensor x, y;
};

Inputs inputs(int64_t d) {
  const auto suffix = ".d" + std::to_string(d);
  return {golden_tensor(kFile, "x" + suffix).clone().requires_grad_(true),
          golden_tensor(kFile, "y" + suffix)};
}

}  // namespace

TEST_CASE("LpLoss matches neuraloperator for d = 1, 2, 3, p = 1, 2, 3, sum and mean") {
  for (int64_t d = 1; d <= 3; ++d) {
    for (int64_t p = 1; p <= 3; ++p) {
      for (const std::string r : {"sum", "mean"}) {
        const std::string key =
            "lp.d" + std::to_string(d) + ".p" + std::to_string(p) + "." + r;
        fno::LpLoss loss(fno::LpLossOptions().d(d).p(p).reduction(fno::parse_reduction(r)));
        auto in = inputs(d);
        check_value(loss.abs(in.x, in.y), key + ".abs");
        auto rel = loss.rel(in.x, in.y);
        check_value(rel, key + ".rel");
        rel.backward();
        check_grad(in.x, key + ".rel.grad");
      }
    }
  }
  fno::LpLoss measured(fno::LpLossOptions().d(2).p(2).measure({2.0}));
  auto in = inputs(2);
  check_value(measured.abs(in.x, in.y), "lp.d2.p2.sum.measure.abs");
}

TEST_CASE("H1Loss matches neuraloperator: periodic, one-sided and mixed stencils") {
  for (int64_t d = 1; d <= 3; ++d) {
    for (const std::string per : {"periodic", "nonperiodic", "mixed"}) {
      if (per == "mixed" && d == 1) continue;
      for (const std::string r : {"sum", "mean"}) {
        const std::string key = "h1.d" + std::to_string(d) + "." + per + "." + r;
        auto o = fno::H1LossOptions().d(d).reduction(fno::parse_reduction(r));
        if (per == "nonperiodic") o.periodic_in_x(false).periodic_in_y(false).periodic_in_z(false);
        if (per == "mixed") o.periodic_in_x(true).periodic_in_y(false).periodic_in_z(true);
        fno::H1Loss loss(o);
        auto in = inputs(d);
        check_value(loss.abs(in.x, in.y), key + ".abs");
        auto rel = loss.rel(in.x, in.y);
        check_value(rel, key + ".rel");
        rel.backward();
        check_grad(in.x, key + ".rel.grad");
      }
    }
  }
  fno::H1Loss measured(fno::H1LossOptions().d(2).measure({2.0, 0.5}));
  auto in = inputs(2);
  check_value(measured.rel(in.x, in.y), "h1.d2.periodic.sum.measure.rel");
  check_value(measured.abs(in.x, in.y), "h1.d2.periodic.sum.measure.abs");
}

TEST_CASE("losses reject mismatched shapes and bad settings with clear messages") {
  fno::LpLoss l2(fno::LpLossOptions().d(2));
  CHECK_THROWS_WITH_AS(l2(torch::zeros({2, 1, 4, 4}), torch::zeros({2, 1, 4, 5})),
                       doctest::Contains("prediction shape [2, 1, 4, 4] differs from target"),
                       c10::Error);
  CHECK_THROWS_WITH_AS(fno::parse_reduction("median"), doctest::Contains("'median'"),
                       std::invalid_argument);
  fno::H1Loss h1(fno::H1LossOptions().d(2).periodic_in_x(false));
  CHECK_THROWS_WITH_AS(h1(torch::zeros({1, 1, 3, 8}), torch::zeros({1, 1, 3, 8})),
                       doctest::Contains("need >= 4 points"), c10::Error);
  CHECK(l2.name() == "L2_2Dloss");
  CHECK(h1.name() == "H1_2DLoss");
}
