// Test helpers: a training step's loss and parameter gradients, measured
// against float64, for comparing two ways of computing one step.
#pragma once

#include <fno/fno.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "golden.h"

namespace fno::test {

struct Grads {
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;
};

template <typename Step>
inline Grads run(fno::FNO& model, Step&& step) {
  model->zero_grad(true);
  Grads g;
  g.loss = step();
  for (const auto& p : model->named_parameters()) g.grads[p.key()] = p.value().grad().clone();
  return g;
}

// The gradients of `model` in float64 (complex128 spectral weights): the truth
// both fp32 steps are measured against.
inline Grads float64_grads(
    fno::FNO& model, const torch::Tensor& x, const torch::Tensor& y,
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss) {
  auto copy = std::dynamic_pointer_cast<fno::FNOImpl>(model->clone());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : copy->parameters()) {
      p.set_data(p.is_complex() ? p.to(torch::kComplexDouble) : p.to(torch::kDouble));
    }
  }
  fno::FNO m64(copy);
  return run(m64, [&] {
    auto l = loss(m64->forward(x.to(torch::kDouble)), y.to(torch::kDouble));
    l.backward();
    return l.detach();
  });
}

// All gradients as one float64 vector (complex ones as their real views).
inline torch::Tensor flat(const Grads& g) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, t] : g.grads) {
    parts.push_back((t.is_complex() ? torch::view_as_real(t) : t).to(torch::kDouble).flatten());
  }
  return torch::cat(parts);
}

// The fp32 whole-grid step's own rounding, measured against float64: its
// worst tensor. (On these small random problems a summed bias gradient is
// 2e-5 off, so the tiled step's gradients are held to that, not to a fixed 1e-5.)
inline double fp32_noise(const Grads& fp32, const Grads& f64) {
  double worst = 0;
  for (const auto& [name, g] : f64.grads) worst = std::max(worst, rel_err(fp32.grads.at(name), g));
  return worst;
}

// The tiled step's gradients equal the whole-grid step's to fp32 rounding:
// all of them together within 1e-5, and no tensor further from the float64
// gradients than twice the whole-grid step's worst.
inline void check_same(const Grads& got, const Grads& ref, const Grads& f64, double noise) {
  CHECK(rel_err(got.loss, ref.loss) <= 1e-6);
  CHECK(rel_err(flat(got), flat(ref)) <= 1e-5);
  for (const auto& [name, g] : f64.grads) {
    INFO("gradient of ", name, "; the whole-grid step's worst error ", noise);
    REQUIRE(got.grads.at(name).defined());
    CHECK(rel_err(got.grads.at(name), g) <= std::max(2 * noise, 1e-5));
  }
}

}  // namespace fno::test
