// The FNO paper's recurrent Navier-Stokes model (its fourier_2d_time.py) as
// functions of a one-step model: from the last t_in records predict the next,
// append the prediction and drop the oldest record, t_out times; the training
// loss adds the loss of every step, and backward runs through the whole
// rollout. The paper's metric is the relative L2 error of the whole predicted
// trajectory; the error of each step shows how it grows along the rollout.
//
//   const auto pred = rollout(model_forward, x, t_out);   // [B, t_out, H, W]
//   const auto loss = rollout_loss(l2, pred, y);          // sum over steps
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace fno {

/// A model of one step: the last t_in records in, the next record out.
// x: [B, t_in, *S] -> [B, 1, *S]
using StepModel = std::function<at::Tensor(const at::Tensor& x)>;

/// The rollout: `steps` predictions, each made from the t_in records before it
/// (the given ones first, then the predictions). Keeps the autograd graph of
/// every step when gradients are on.
// x: [B, t_in, *S] -> [B, steps, *S]
at::Tensor rollout(const StepModel& model, const at::Tensor& x, int64_t steps);

/// The rollout's training loss: loss(pred step t, y step t) added over the
/// steps, with `loss` adding over the batch (LpLoss, H1Loss), as the paper.
// pred, y: [B, T, *S] -> scalar
at::Tensor rollout_loss(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss,
                        const at::Tensor& pred, const at::Tensor& y);

/// The relative L2 error of each sample's whole trajectory, ||pred - y|| /
/// ||y|| over all steps and points (the paper's full-trajectory error),
/// added over the batch.
// pred, y: [B, T, *S] -> scalar
at::Tensor trajectory_rel_l2(const at::Tensor& pred, const at::Tensor& y);

/// The relative L2 error of each step, added over the batch: entry t is the
/// sum over samples of ||pred_t - y_t|| / ||y_t||.
// pred, y: [B, T, *S] -> [T]
at::Tensor per_step_rel_l2(const at::Tensor& pred, const at::Tensor& y);

/// The relative L2 error of each sample's trajectory up to each step, added
/// over the batch: entry t is the sum over samples of ||pred_{0..t} -
/// y_{0..t}|| / ||y_{0..t}||, so the last entry is trajectory_rel_l2's, and
/// entry k - 1 is the whole-trajectory error of a k-step rollout.
// pred, y: [B, T, *S] -> [T]
at::Tensor cumulative_rel_l2(const at::Tensor& pred, const at::Tensor& y);

}  // namespace fno
