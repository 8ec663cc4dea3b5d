// The recurrent Navier-Stokes rollout (fno_engine/rollout.h).
#include <fno_engine/rollout.h>

#include <fno/losses.h>

#include <torch/torch.h>

#include <utility>
#include <vector>

namespace fno {
namespace {

void check_pair(const at::Tensor& pred, const at::Tensor& y, const char* fn) {
  TORCH_CHECK(pred.dim() >= 3 && pred.sizes() == y.sizes(), fn,
              ": prediction and truth must be [B, T, *S] of one shape, got ", pred.sizes(), " and ",
              y.sizes());
}

}  // namespace

at::Tensor rollout(const StepModel& model, const at::Tensor& x, int64_t steps) {
  TORCH_CHECK(x.dim() >= 3, "rollout: x must be [B, t_in, *S], got ", x.sizes());
  TORCH_CHECK(steps >= 1, "rollout: steps must be >= 1, got ", steps);
  std::vector<at::Tensor> preds;
  preds.reserve(static_cast<size_t>(steps));
  at::Tensor window = x;
  for (int64_t t = 0; t < steps; ++t) {
    // window: [B, t_in, *S] -> next: [B, 1, *S]
    auto next = model(window);
    TORCH_CHECK(next.dim() == x.dim() && next.size(1) == 1 && next.size(0) == x.size(0),
                "rollout: the model must predict one record [B, 1, *S], got ", next.sizes());
    preds.push_back(next);
    window = torch::cat({window.narrow(1, 1, window.size(1) - 1), next}, 1);
  }
  return torch::cat(preds, 1);
}

at::Tensor rollout_loss(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss,
                        const at::Tensor& pred, const at::Tensor& y) {
  check_pair(pred, y, "rollout_loss");
  at::Tensor total;
  for (int64_t t = 0; t < pred.size(1); ++t) {
    // step t: [B, 1, *S]
    auto l = loss(pred.narrow(1, t, 1), y.narrow(1, t, 1));
    total = t == 0 ? l : total + l;
  }
  return total;
}

at::Tensor trajectory_rel_l2(const at::Tensor& pred, const at::Tensor& y) {
  check_pair(pred, y, "trajectory_rel_l2");
  // Every dim but the batch's: the whole trajectory of each sample.
  return LpLoss(LpLossOptions().d(pred.dim() - 1).p(2)).rel(pred, y);
}

namespace {

// The squared norms of the error and of the truth per sample and record.
// pred, y: [B, T, *S] -> {[B, T], [B, T]}
std::pair<at::Tensor, at::Tensor> squared_norms(const at::Tensor& pred, const at::Tensor& y) {
  return {(pred - y).flatten(2).pow(2).sum(-1), y.flatten(2).pow(2).sum(-1)};
}

// sum over samples of sqrt(err) / (sqrt(truth) + LpLoss's eps): [B, T] -> [T]
at::Tensor summed_ratio(const at::Tensor& err, const at::Tensor& truth) {
  return (err.sqrt() / (truth.sqrt() + LpLossOptions().eps())).sum(0);
}

}  // namespace

at::Tensor per_step_rel_l2(const at::Tensor& pred, const at::Tensor& y) {
  check_pair(pred, y, "per_step_rel_l2");
  const auto [err, truth] = squared_norms(pred, y);
  return summed_ratio(err, truth);
}

at::Tensor cumulative_rel_l2(const at::Tensor& pred, const at::Tensor& y) {
  check_pair(pred, y, "cumulative_rel_l2");
  const auto [err, truth] = squared_norms(pred, y);  // summed over records 0..t
  return summed_ratio(err.cumsum(1), truth.cumsum(1));
}

}  // namespace fno
