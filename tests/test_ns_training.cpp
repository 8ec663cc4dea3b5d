// Navier-Stokes training (issue 27, item 3): the recurrent rollout against an
// explicit loop (predictions, the loss summed over the steps, and gradients
// through the whole rollout, checked against autograd on the loop and against
// finite differences in float64), the per-record and trajectory errors.
#include <fno/fno.h>
#include <fno/losses.h>
#include <fno/optim.h>
#include <fno_data/darcy.h>
#include <fno_data/navier_stokes.h>
#include <fno_data/navier_stokes_gen.h>
#include <fno_train/config.h>
#include <fno_train/offload_step.h>
#include <fno_train/rollout.h>
#include <fno_train/train_step.h>
#include <fno_train/trainer.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "golden.h"

using fno::test::out_path;
using fno::test::rel_err;

namespace {

// A tiny 2D FNO from 3 records to the next one.
fno::FNO tiny_2d(int64_t t_in = 3) {
  torch::manual_seed(3);
  return fno::FNO(fno::FNOOptions({4, 4}, t_in, 1, 6).n_layers(2));
}

fno::LpLoss l2_2d() { return fno::LpLoss(fno::LpLossOptions().d(2).p(2)); }

// The rollout written out by hand: the window of the last t_in records, the
// next predicted from it, appended, the oldest dropped.
std::vector<torch::Tensor> explicit_rollout(fno::FNO& model, const torch::Tensor& x,
                                            int64_t steps) {
  std::vector<torch::Tensor> preds;
  std::vector<torch::Tensor> window;
  for (int64_t c = 0; c < x.size(1); ++c) window.push_back(x.select(1, c));
  for (int64_t t = 0; t < steps; ++t) {
    auto next = model->forward(torch::stack(window, 1));  // [B, 1, H, W]
    preds.push_back(next);
    window.erase(window.begin());
    window.push_back(next.select(1, 0));
  }
  return preds;
}

// sum over steps and samples of ||p - y|| / ||y||, by hand.
torch::Tensor explicit_loss(const std::vector<torch::Tensor>& preds, const torch::Tensor& y) {
  torch::Tensor total = torch::zeros({}, preds[0].options());
  for (size_t t = 0; t < preds.size(); ++t) {
    for (int64_t b = 0; b < y.size(0); ++b) {
      const auto p = preds[t][b][0];
      const auto truth = y[b][static_cast<int64_t>(t)];
      total = total + (p - truth).pow(2).sum().sqrt() / truth.pow(2).sum().sqrt();
    }
  }
  return total;
}

}  // namespace

TEST_CASE("rollout: the predictions and the summed loss of an explicit loop") {
  auto model = tiny_2d();
  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, 8, 8});
  const auto y = torch::randn({2, 4, 8, 8});
  torch::NoGradGuard no_grad;
  const auto pred = fno::rollout([&](const at::Tensor& in) { return model->forward(in); }, x, 4);
  REQUIRE(pred.sizes() == torch::IntArrayRef({2, 4, 8, 8}));
  const auto ref = explicit_rollout(model, x, 4);
  for (int64_t t = 0; t < 4; ++t) {
    INFO("step " << t);
    CHECK(torch::equal(pred.narrow(1, t, 1), ref[static_cast<size_t>(t)]));
  }
  // Step 1 is made from records 1, 2 and the first prediction.
  const auto second = model->forward(torch::cat({x.narrow(1, 1, 2), ref[0]}, 1));
  CHECK(torch::equal(second, ref[1]));
  const auto l2 = l2_2d();
  const auto loss =
      fno::rollout_loss([&](const auto& a, const auto& b) { return l2(a, b); }, pred, y);
  CHECK(loss.item<double>() == doctest::Approx(explicit_loss(ref, y).item<double>()).epsilon(1e-5));
  CHECK_THROWS_AS(fno::rollout([&](const at::Tensor& in) { return in; }, x, 2), c10::Error);
}

TEST_CASE("rollout errors: per record and over the whole trajectory") {
  torch::manual_seed(7);
  const auto y = torch::randn({3, 4, 8, 8}, torch::kDouble);
  const std::vector<double> c{0.1, -0.2, 0.3, 0.05};
  auto pred = y.clone();
  for (int64_t t = 0; t < 4; ++t) pred.select(1, t).mul_(1 + c[static_cast<size_t>(t)]);
  const auto per = fno::per_step_rel_l2(pred, y);
  REQUIRE(per.sizes() == torch::IntArrayRef({4}));
  for (int64_t t = 0; t < 4; ++t) {
    CHECK(per[t].item<double>() == doctest::Approx(3 * std::abs(c[static_cast<size_t>(t)])));
  }
  // Whole trajectory: sqrt(sum_t c_t^2 ||y_t||^2) / ||y||, per sample, summed.
  double want = 0;
  for (int64_t b = 0; b < 3; ++b) {
    double num = 0;
    for (int64_t t = 0; t < 4; ++t) {
      num += c[static_cast<size_t>(t)] * c[static_cast<size_t>(t)] *
             y[b][t].pow(2).sum().item<double>();
    }
    want += std::sqrt(num) / y[b].norm().item<double>();
  }
  CHECK(fno::trajectory_rel_l2(pred, y).item<double>() == doctest::Approx(want));
}

TEST_CASE(
    "rollout gradients: TrainStep's rolled-out step, autograd on a loop, finite differences") {
  auto model = tiny_2d();
  torch::manual_seed(11);
  const auto x = torch::randn({2, 3, 8, 8});
  const auto y = torch::randn({2, 3, 8, 8});
  const auto l2 = l2_2d();
  const fno::StepLoss loss = [&](const at::Tensor& a, const at::Tensor& b) { return l2(a, b); };

  // The shared step with a rollout of 3: its loss and gradients (lr 0: the
  // update would change nothing, but only forward_backward runs here).
  fno::OffloadedStep offloaded(model, fno::OffloadSettings{});
  fno::AdamW opt(model->parameters(), fno::AdamWOptions(1e-3));
  fno::TrainStep step(offloaded, opt, loss);
  step.set_rollout(3);
  const auto got = step.forward_backward(x, y);
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();

  // The explicit loop, autograd on it.
  model->zero_grad();
  const auto want = explicit_loss(explicit_rollout(model, x, 3), y);
  want.backward();
  CHECK(got.item<double>() == doctest::Approx(want.item<double>()).epsilon(1e-5));
  for (const auto& p : model->named_parameters()) {
    INFO("parameter " << p.key());
    CHECK(rel_err(grads[p.key()], p.value().grad()) < 1e-5);
  }

  // Finite differences in float64 along a random direction of every
  // parameter (complex ones too: d/de L(theta + e v) = Re <grad, v>).
  auto copy = std::dynamic_pointer_cast<fno::FNOImpl>(model->clone());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : copy->parameters()) {
      p.set_data(p.is_complex() ? p.to(torch::kComplexDouble) : p.to(torch::kDouble));
    }
  }
  fno::FNO m64(copy);
  const auto x64 = x.to(torch::kDouble), y64 = y.to(torch::kDouble);
  const auto loss64 = [&] {
    return fno::rollout_loss(
        loss, fno::rollout([&](const at::Tensor& in) { return m64->forward(in); }, x64, 3), y64);
  };
  m64->zero_grad();
  loss64().backward();
  torch::manual_seed(13);
  std::vector<torch::Tensor> dirs;
  double analytic = 0;
  for (const auto& p : m64->parameters()) {
    dirs.push_back(torch::randn_like(p));
    analytic += torch::real((p.grad().conj() * dirs.back()).sum()).item<double>();
  }
  const double eps = 1e-6;
  const auto shifted = [&](double e) {
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& p : m64->parameters()) p.add_(dirs[i++], e);
    const double v = loss64().item<double>();
    i = 0;
    for (auto& p : m64->parameters()) p.sub_(dirs[i++], e);
    return v;
  };
  const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  CHECK(numeric == doctest::Approx(analytic).epsilon(1e-5));
  CHECK(std::abs(analytic) > 1e-3);  // a real slope, not two zeros
}

TEST_CASE("rollout steps refuse offload policies other than none, in one line") {
  auto model = tiny_2d();
  fno::OffloadSettings settings;
  settings.policy = fno::offload::parse_policy("all");
  fno::OffloadedStep offloaded(model, settings);
  fno::AdamW opt(model->parameters(), fno::AdamWOptions(1e-3));
  const auto l2 = l2_2d();
  fno::TrainStep step(offloaded, opt, [&](const auto& a, const auto& b) { return l2(a, b); });
  step.set_rollout(2);
  CHECK_THROWS_WITH_AS(
      step.forward_backward(torch::randn({1, 3, 8, 8}), torch::randn({1, 2, 8, 8})),
      doctest::Contains("needs policy none and one micro-batch, got policy 'all'"),
      std::invalid_argument);
}
