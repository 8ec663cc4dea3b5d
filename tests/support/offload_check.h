// Shared by the CPU and GPU offload tests: one training step's output and
// gradients with a plan and an offloader, against the plain model.
#pragma once

#include <fno/fno.h>
#include <fno_engine/staged.h>
#include <fno_offload/offload.h>
#include <fno_offload/planner.h>

#include <torch/torch.h>

#include <map>
#include <string>

namespace fno::test {

struct StepResult {
  torch::Tensor output;
  std::map<std::string, torch::Tensor> grads;
  offload::StepStats stats;
};

// loss = sum((model(x) - 0.5)^2 * w): every output entry gets its own gradient.
inline StepResult run_step(FNO model, const torch::Tensor& x, const torch::Tensor& w,
                           const offload::Plan* plan, offload::Offloader* off) {
  model->zero_grad(/*set_to_none=*/true);
  StepResult r;
  torch::Tensor y;
  if (plan == nullptr) {
    y = model->forward(x);
    ((y - 0.5).pow(2) * w).sum().backward();
  } else {
    const auto stages = fno_stages(model, x.sizes().slice(2).vec());
    if (off != nullptr) off->begin_step();
    {
      std::optional<offload::OffloadGuard> guard;
      // Outside the stages (the loss) nothing moves; each stage's scope sets its level.
      if (off != nullptr) guard.emplace(*off, offload::Level::kKeep);
      y = offload::run_stages(stages, *plan, x, off);
      ((y - 0.5).pow(2) * w).sum().backward();
    }
    if (off != nullptr) r.stats = off->end_step();
  }
  r.output = y.detach().clone();
  for (const auto& p : model->named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

}  // namespace fno::test
