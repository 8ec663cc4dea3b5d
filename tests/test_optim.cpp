// AdamW (and its torch_adam step) and the lr schedulers against neuraloperator
// 2.0.0 / torch.optim (golden file optim.pt): parameters after each of 12 steps, lr sequences.
#include <fno/optim.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "golden.h"

using fno::test::golden;
using fno::test::golden_tensor;
using fno::test::rel_err;

namespace {

constexpr double kTol = 1e-6;
const char* kFile = "optim.pt";
constexpr int kSteps = 12;

using SchedulerFactory =
    std::function<std::unique_ptr<fno::LRScheduler>(torch::optim::Optimizer&)>;

void replay(const std::string& cfg, const fno::AdamWOptions& options,
            const SchedulerFactory& make_scheduler = nullptr) {
  INFO("config ", cfg);
  auto real = golden_tensor(kFile, "p0.real").clone().requires_grad_(true);
  auto cplx = golden_tensor(kFile, "p0.cplx").clone().requires_grad_(true);
  fno::AdamW opt({real, cplx}, options);
  std::unique_ptr<fno::LRScheduler> sched;
  if (make_scheduler) sched = make_scheduler(opt);
  for (int t = 1; t <= kSteps; ++t) {
    const std::string s = std::to_string(t);
    INFO("step ", t);
    CHECK(opt.param_groups()[0].options().get_lr() ==
          doctest::Approx(golden_tensor(kFile, cfg + ".lr" + s).item<double>()).epsilon(1e-12));
    real.mutable_grad() = golden_tensor(kFile, "g." + s + ".real").clone();
    cplx.mutable_grad() = golden_tensor(kFile, "g." + s + ".cplx").clone();
    opt.step();
    if (sched) sched->step();
    CHECK(rel_err(real, golden_tensor(kFile, cfg + ".step" + s + ".real")) <= kTol);
    CHECK(rel_err(cplx, golden_tensor(kFile, cfg + ".step" + s + ".cplx")) <= kTol);
  }
}

void check_lr_sequence(const std::string& name, double base,
                       const SchedulerFactory& make_scheduler) {
  INFO("scheduler ", name);
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(base));
  auto sched = make_scheduler(opt);
  const auto lrs = golden_tensor(kFile, "sched." + name + ".lr");
  const auto* metric = golden(kFile).find("sched." + name + ".metric");
  CHECK(sched->get_last_lr()[0] ==
        doctest::Approx(golden_tensor(kFile, "sched." + name + ".lr0").item<double>()));
  for (int64_t i = 0; i < lrs.numel(); ++i) {
    if (metric) {
      sched->step((*metric)[i].item<double>());
    } else {
      sched->step();
    }
    INFO("step ", i + 1);
    CHECK(sched->get_last_lr()[0] == doctest::Approx(lrs[i].item<double>()).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("AdamW matches neuraloperator's AdamW over 12 steps, real and complex parameters") {
  replay("adamw_default", fno::AdamWOptions(1e-3));
  replay("adamw_wd", fno::AdamWOptions(8e-3).weight_decay(1e-4));
  replay("adamw_wd_nobias", fno::AdamWOptions(1e-2)
                                .betas({0.8, 0.99})
                                .eps(1e-8)
                                .weight_decay(1e-2)
                                .correct_bias(false));
}

TEST_CASE("AdamW with torch_adam matches torch.optim.Adam over 12 steps, real and complex") {
  replay("adam_wd", fno::AdamWOptions(8e-3).weight_decay(1e-4).torch_adam(true));
  replay("adam_paper", fno::AdamWOptions(1e-3).weight_decay(1e-4).eps(1e-8).torch_adam(true),
         [](torch::optim::Optimizer& o) { return std::make_unique<fno::StepLR>(o, 3, 0.5); });
  replay("adam_betas_wd",
         fno::AdamWOptions(1e-2).betas({0.8, 0.99}).eps(1e-6).weight_decay(1e-1).torch_adam(true));
  // The two optimizers differ where they should: an AdamW replay of an Adam
  // trajectory with weight decay fails.
  auto real = golden_tensor(kFile, "p0.real").clone().requires_grad_(true);
  auto cplx = golden_tensor(kFile, "p0.cplx").clone().requires_grad_(true);
  fno::AdamW adamw({real, cplx}, fno::AdamWOptions(1e-2).betas({0.8, 0.99}).weight_decay(1e-1));
  for (int t = 1; t <= kSteps; ++t) {
    real.mutable_grad() = golden_tensor(kFile, "g." + std::to_string(t) + ".real").clone();
    cplx.mutable_grad() = golden_tensor(kFile, "g." + std::to_string(t) + ".cplx").clone();
    adamw.step();
  }
  CHECK(rel_err(cplx, golden_tensor(kFile, "adam_betas_wd.step12.cplx")) > 100 * kTol);
}

TEST_CASE("AdamW under CosineAnnealingLR and StepLR matches torch's schedulers") {
  replay("adamw_cosine", fno::AdamWOptions(8e-3).weight_decay(1e-4),
         [](torch::optim::Optimizer& o) { return std::make_unique<fno::CosineAnnealingLR>(o, 5); });
  replay("adamw_steplr", fno::AdamWOptions(1e-3),
         [](torch::optim::Optimizer& o) { return std::make_unique<fno::StepLR>(o, 3, 0.5); });
}

TEST_CASE("lr sequences of CosineAnnealingLR, StepLR and ReduceLROnPlateau match torch") {
  check_lr_sequence("cosine", 1.0, [](torch::optim::Optimizer& o) {
    return std::make_unique<fno::CosineAnnealingLR>(o, 7, 0.01);
  });
  check_lr_sequence("cosine30", 8e-3, [](torch::optim::Optimizer& o) {
    return std::make_unique<fno::CosineAnnealingLR>(o, 30);
  });
  check_lr_sequence("steplr", 0.5,
                    [](torch::optim::Optimizer& o) { return std::make_unique<fno::StepLR>(o, 4, 0.3); });
  check_lr_sequence("plateau", 1.0, [](torch::optim::Optimizer& o) {
    return std::make_unique<fno::ReduceLROnPlateau>(
        o, fno::ReduceLROnPlateauOptions().factor(0.5).patience(2).cooldown(1).min_lr(0.05));
  });
  check_lr_sequence("plateau_max_abs", 1.0, [](torch::optim::Optimizer& o) {
    return std::make_unique<fno::ReduceLROnPlateau>(o, fno::ReduceLROnPlateauOptions()
                                                           .mode("max")
                                                           .factor(0.1)
                                                           .patience(1)
                                                           .threshold(0.01)
                                                           .threshold_mode("abs"));
  });
}

TEST_CASE("AdamW state survives state_dict/load_state_dict exactly") {
  torch::manual_seed(3);
  auto a = torch::randn({4, 3}, torch::requires_grad());
  auto c = torch::randn({2, 2}, torch::dtype(torch::kComplexFloat).requires_grad(true));
  auto a2 = a.detach().clone().requires_grad_(true);
  auto c2 = c.detach().clone().requires_grad_(true);
  fno::AdamW opt({a, c}, fno::AdamWOptions(1e-2).weight_decay(1e-3));
  for (int i = 0; i < 3; ++i) {
    a.mutable_grad() = torch::randn_like(a);
    c.mutable_grad() = torch::randn_like(c);
    opt.step();
  }
  fno::AdamW resumed({a2, c2}, fno::AdamWOptions(1e-2).weight_decay(1e-3));
  {
    torch::NoGradGuard g;
    a2.copy_(a);
    c2.copy_(c);
  }
  resumed.load_state_dict(opt.state_dict());
  auto ga = torch::randn_like(a), gc = torch::randn_like(c);
  a.mutable_grad() = ga;
  c.mutable_grad() = gc;
  a2.mutable_grad() = ga.clone();
  c2.mutable_grad() = gc.clone();
  opt.step();
  resumed.step();
  CHECK(torch::equal(a, a2));
  CHECK(torch::equal(c, c2));
}

TEST_CASE("optimizer and schedulers reject invalid settings naming the value") {
  auto p = torch::zeros({1}, torch::requires_grad());
  CHECK_THROWS_WITH_AS(fno::AdamW({p}, fno::AdamWOptions(-1.0)),
                       doctest::Contains("invalid learning rate -1"), c10::Error);
  CHECK_THROWS_WITH_AS(fno::AdamW({p}, fno::AdamWOptions(1e-3).betas({1.0, 0.9})),
                       doctest::Contains("invalid beta1 1"), c10::Error);
  fno::AdamW opt({p});
  CHECK_THROWS_WITH_AS(fno::CosineAnnealingLR(opt, 0), doctest::Contains("T_max must be > 0, got 0"),
                       c10::Error);
  CHECK_THROWS_WITH_AS(fno::StepLR(opt, -2), doctest::Contains("step_size must be > 0, got -2"),
                       c10::Error);
  CHECK_THROWS_WITH_AS(fno::ReduceLROnPlateau(opt, fno::ReduceLROnPlateauOptions().mode("up")),
                       doctest::Contains("'up'"), c10::Error);
}

TEST_CASE("clip_grad_norm_ clips as torch::nn::utils::clip_grad_norm_, real and complex") {
  // Three parameters (one complex, one without a gradient); max norms under
  // and over the total norm, and inf (measure only).
  for (const double max_norm : {0.3, 1e3, std::numeric_limits<double>::infinity()}) {
    INFO("max_norm ", max_norm);
    torch::manual_seed(3);
    std::vector<torch::Tensor> ours, theirs;
    for (const auto& t : {torch::randn({4, 5}), torch::randn({3, 2}, torch::kComplexFloat),
                          torch::randn({7}), torch::randn({2})}) {
      ours.push_back(t.clone().requires_grad_(true));
      theirs.push_back(t.clone().requires_grad_(true));
    }
    for (size_t i = 0; i < 3; ++i) {  // (the last parameter keeps no gradient)
      const auto g = torch::randn_like(ours[i]);
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    const auto norm = fno::clip_grad_norm_(ours, max_norm);
    const double want = std::isinf(max_norm) ? torch::nn::utils::clip_grad_norm_(theirs, 1e30)
                                             : torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    REQUIRE(norm.defined());
    CHECK(norm.dim() == 0);
    CHECK(norm.item<double>() == doctest::Approx(want).epsilon(1e-6));
    for (size_t i = 0; i < 3; ++i) CHECK(rel_err(ours[i].grad(), theirs[i].grad()) <= 1e-6);
    CHECK_FALSE(ours[3].grad().defined());
  }
  auto p = torch::zeros({2}, torch::requires_grad());
  CHECK_FALSE(fno::clip_grad_norm_({p}, 1.0).defined());  // no gradient: nothing to clip
  CHECK_THROWS_WITH_AS(fno::clip_grad_norm_({p}, 0.0), doctest::Contains("got 0"), c10::Error);
}
