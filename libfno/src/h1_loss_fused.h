// The relative H1 loss's CUDA kernels (cuda/h1_loss.h) on torch tensors;
// internal to libfno, called from H1Loss::rel in losses.cpp.
#pragma once

#include <torch/types.h>

#include <utility>
#include <vector>

namespace fno::detail {

/// Whether the kernels compute H1Loss::rel(x, y) over the last d dims: the
/// fused kernels on (and FNO_FUSED_LOSS not 0), x and y fp32 CUDA tensors of
/// one device and shape, every one of the d dims periodic, y needing no
/// gradient, and fewer than 2^31 points a function.
bool fused_h1_rel_usable(const torch::Tensor& x, const torch::Tensor& y, int64_t d, bool periodic);

/// The loss (0-dim) and the rows' gradient factors [rows] (h: the grid step
/// of each of the d dims; mean: the mean over rows, else their sum).
// x, y: [..., *S] -> loss [], coef [prod(...)]
std::pair<torch::Tensor, torch::Tensor> fused_h1_rel_forward(const torch::Tensor& x,
                                                             const torch::Tensor& y,
                                                             const std::vector<double>& h,
                                                             double eps, bool mean);

/// dloss/dx times the upstream gradient `grad` (0-dim, on x's device).
// x, y: [..., *S], coef: [prod(...)], grad: [] -> [..., *S]
torch::Tensor fused_h1_rel_backward(const torch::Tensor& x, const torch::Tensor& y,
                                    const torch::Tensor& coef, const torch::Tensor& grad,
                                    const std::vector<double>& h, bool mean);

}  // namespace fno::detail
