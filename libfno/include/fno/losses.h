// Data losses with neuraloperator 2.0.0's semantics (neuralop.losses.data_losses).
//
// Inputs are [..., *S] with d trailing spatial dims; the norm is taken over the
// spatial dims of each leading index (batch, channel), then reduced over all
// of them by `reduction` (sum, neuraloperator's default, or mean).
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fno {

enum class Reduction { kSum, kMean };

/// Parses "sum" or "mean"; throws std::invalid_argument naming the value otherwise.
Reduction parse_reduction(const std::string& name);

struct LpLossOptions {
  /// Number of trailing spatial dims.
  TORCH_ARG(int64_t, d) = 1;
  /// Order of the norm (integer >= 1).
  TORCH_ARG(int64_t, p) = 2;
  /// Domain size per spatial dim ({m} for all); used by abs() through the quadrature.
  TORCH_ARG(std::vector<double>, measure) = {1.0};
  /// How per-sample losses are combined.
  TORCH_ARG(Reduction, reduction) = Reduction::kSum;
  /// Added to the denominator of relative errors.
  TORCH_ARG(double, eps) = 1e-8;
};

/// Lp loss. operator() is the relative error ||x - y||_p / (||y||_p + eps).
class LpLoss {
 public:
  explicit LpLoss(LpLossOptions options = {});
  // x, y: [..., *S] -> scalar
  torch::Tensor rel(const torch::Tensor& x, const torch::Tensor& y) const;
  // x, y: [..., *S] -> scalar; quadrature = measure / size per dim unless given.
  torch::Tensor abs(const torch::Tensor& x, const torch::Tensor& y,
                    std::vector<double> quadrature = {}) const;
  torch::Tensor operator()(const torch::Tensor& y_pred, const torch::Tensor& y) const {
    return rel(y_pred, y);
  }
  /// "L2_2Dloss" etc., as neuraloperator names it.
  std::string name() const;
  const LpLossOptions& options() const { return options_; }

 private:
  LpLossOptions options_;
};

struct H1LossOptions {
  /// Number of trailing spatial dims (1, 2 or 3).
  TORCH_ARG(int64_t, d) = 1;
  /// Domain size per spatial dim ({m} for all); sets the finite-difference step.
  TORCH_ARG(std::vector<double>, measure) = {1.0};
  /// How per-sample losses are combined.
  TORCH_ARG(Reduction, reduction) = Reduction::kSum;
  /// Added to the denominator of relative errors.
  TORCH_ARG(double, eps) = 1e-8;
  /// Periodic central differences along x (the first spatial dim); one-sided at the ends otherwise.
  TORCH_ARG(bool, periodic_in_x) = true;
  /// Same along y (the second spatial dim).
  TORCH_ARG(bool, periodic_in_y) = true;
  /// Same along z (the third spatial dim).
  TORCH_ARG(bool, periodic_in_z) = true;
};

/// H1 (Sobolev) loss: the L2 norm of the function and of its first derivatives.
class H1Loss {
 public:
  explicit H1Loss(H1LossOptions options = {});
  // x, y: [..., *S] -> scalar
  torch::Tensor rel(const torch::Tensor& x, const torch::Tensor& y,
                    std::vector<double> quadrature = {}) const;
  torch::Tensor abs(const torch::Tensor& x, const torch::Tensor& y,
                    std::vector<double> quadrature = {}) const;
  torch::Tensor operator()(const torch::Tensor& y_pred, const torch::Tensor& y) const {
    return rel(y_pred, y);
  }
  std::string name() const;
  const H1LossOptions& options() const { return options_; }

 private:
  // Grid step per spatial dim: `given`, or measure / size.
  std::vector<double> quadrature_for(const torch::Tensor& x, std::vector<double> given) const;
  H1LossOptions options_;
};

/// First derivative along `dim` with step h: periodic central differences, or
/// central in the interior with third-order one-sided stencils at both ends
/// (needs >= 4 points), as neuraloperator's FiniteDiff.
torch::Tensor finite_diff_first(const torch::Tensor& u, int64_t dim, double h, bool periodic);

}  // namespace fno
