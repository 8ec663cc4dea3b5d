#include <fno/losses.h>

#include <torch/torch.h>

#include <stdexcept>

#include "h1_loss_fused.h"

namespace fno {

Reduction parse_reduction(const std::string& name) {
  if (name == "sum") return Reduction::kSum;
  if (name == "mean") return Reduction::kMean;
  throw std::invalid_argument("unknown reduction '" + name + "' (expected sum or mean)");
}

namespace {

torch::Tensor reduce_all(const torch::Tensor& x, Reduction r) {
  return (r == Reduction::kSum ? x.sum() : x.mean()).squeeze();
}

std::vector<double> uniform_quadrature(const torch::Tensor& x, int64_t d,
                                       const std::vector<double>& measure) {
  TORCH_CHECK(measure.size() == 1 || static_cast<int64_t>(measure.size()) == d,
              "loss measure needs 1 or ", d, " entries, got ", measure.size());
  std::vector<double> q(d);
  for (int64_t j = 0; j < d; ++j) {
    const double m = measure.size() == 1 ? measure[0] : measure[j];
    q[j] = m / static_cast<double>(x.size(x.dim() - d + j));
  }
  return q;
}

double product(const std::vector<double>& v) {
  double p = 1.0;
  for (double x : v) p *= x;
  return p;
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& y, int64_t d, const char* who) {
  TORCH_CHECK(x.sizes() == y.sizes(), who, ": prediction shape ", x.sizes(),
              " differs from target shape ", y.sizes());
  TORCH_CHECK(x.dim() >= d, who, ": input of rank ", x.dim(), " has fewer than d=", d,
              " spatial dims");
}

}  // namespace

// ---------------------------------------------------------------------------
// LpLoss
// ---------------------------------------------------------------------------
LpLoss::LpLoss(LpLossOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.d() >= 1, "LpLoss: d must be >= 1, got ", options_.d());
  TORCH_CHECK(options_.p() >= 1, "LpLoss: p must be >= 1, got ", options_.p());
}

std::string LpLoss::name() const {
  return "L" + std::to_string(options_.p()) + "_" + std::to_string(options_.d()) + "Dloss";
}

torch::Tensor LpLoss::abs(const torch::Tensor& x, const torch::Tensor& y,
                          std::vector<double> quadrature) const {
  const int64_t d = options_.d();
  const int64_t p = options_.p();
  check_inputs(x, y, d, "LpLoss");
  if (quadrature.empty()) quadrature = uniform_quadrature(x, d, options_.measure());
  if (quadrature.size() == 1 && d > 1) quadrature.assign(d, quadrature[0]);
  const double c = product(quadrature);
  auto diff = x.flatten(-d) - y.flatten(-d);
  torch::Tensor out;
  if (p == 1) {
    out = c * diff.abs().sum(-1);
  } else if (p % 2 == 0) {
    out = c * diff.pow(p).sum(-1);
  } else {
    out = c * diff.abs().pow(p).sum(-1);
  }
  if (p != 1) out = out.pow(1.0 / static_cast<double>(p));
  return reduce_all(out, options_.reduction());
}

torch::Tensor LpLoss::rel(const torch::Tensor& x, const torch::Tensor& y) const {
  const int64_t d = options_.d();
  const int64_t p = options_.p();
  check_inputs(x, y, d, "LpLoss");
  auto diff = x.flatten(-d) - y.flatten(-d);
  auto yf = y.flatten(-d);
  torch::Tensor num, den;
  if (p == 1) {
    num = diff.abs().sum(-1);
    den = yf.abs().sum(-1);
  } else if (p % 2 == 0) {
    num = diff.pow(p).sum(-1);
    den = yf.pow(p).sum(-1);
  } else {
    num = diff.abs().pow(p).sum(-1);
    den = yf.abs().pow(p).sum(-1);
  }
  torch::Tensor out;
  if (p != 1) {
    const double inv = 1.0 / static_cast<double>(p);
    out = num.pow(inv) / (den.pow(inv) + options_.eps());
  } else {
    out = num / (den + options_.eps());
  }
  return reduce_all(out, options_.reduction());
}

// ---------------------------------------------------------------------------
// Finite differences
// ---------------------------------------------------------------------------
torch::Tensor finite_diff_first(const torch::Tensor& u, int64_t dim, double h, bool periodic) {
  dim = dim < 0 ? dim + u.dim() : dim;
  if (periodic) {
    return (torch::roll(u, {-1}, {dim}) - torch::roll(u, {1}, {dim})) / (2.0 * h);
  }
  const int64_t n = u.size(dim);
  TORCH_CHECK(n >= 4, "non-periodic finite differences need >= 4 points along dim ", dim,
              ", got ", n);
  auto at = [&](int64_t i) { return u.narrow(dim, i < 0 ? n + i : i, 1); };
  auto interior = (u.narrow(dim, 2, n - 2) - u.narrow(dim, 0, n - 2)) / (2.0 * h);
  auto left = (-11 * at(0) + 18 * at(1) - 9 * at(2) + 2 * at(3)) / (6.0 * h);
  auto right = (-2 * at(-4) + 9 * at(-3) - 18 * at(-2) + 11 * at(-1)) / (6.0 * h);
  return torch::cat({left, interior, right}, dim);
}

// ---------------------------------------------------------------------------
// H1Loss
// ---------------------------------------------------------------------------
H1Loss::H1Loss(H1LossOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.d() >= 1 && options_.d() <= 3, "H1Loss: d must be 1, 2 or 3, got ",
              options_.d());
}

std::string H1Loss::name() const { return "H1_" + std::to_string(options_.d()) + "DLoss"; }

std::vector<double> H1Loss::quadrature_for(const torch::Tensor& x,
                                           std::vector<double> given) const {
  const int64_t d = options_.d();
  if (given.empty()) return uniform_quadrature(x, d, options_.measure());
  if (given.size() == 1) given.assign(d, given[0]);
  TORCH_CHECK(static_cast<int64_t>(given.size()) == d, "H1Loss: quadrature needs 1 or ", d,
              " entries, got ", given.size());
  return given;
}

namespace {

// Sum over the flattened spatial dims of (a - b)^2, for the function and each
// first derivative; `b2` gets the same sums of b^2 when requested.
struct H1Terms {
  std::vector<torch::Tensor> diff;  // [0]: function, [1..d]: derivatives
  std::vector<torch::Tensor> ynorm;
};

H1Terms h1_terms(const torch::Tensor& x, const torch::Tensor& y, const H1LossOptions& o,
                 const std::vector<double>& q, bool with_ynorm) {
  const int64_t d = o.d();
  const bool periodic[3] = {o.periodic_in_x(), o.periodic_in_y(), o.periodic_in_z()};
  H1Terms t;
  auto sq_sum = [&](const torch::Tensor& a) { return a.flatten(-d).pow(2).sum(-1); };
  t.diff.push_back(sq_sum(x - y));
  if (with_ynorm) t.ynorm.push_back(sq_sum(y));
  for (int64_t j = 0; j < d; ++j) {
    const int64_t dim = x.dim() - d + j;
    auto dx = finite_diff_first(x, dim, q[j], periodic[j]);
    auto dy = finite_diff_first(y, dim, q[j], periodic[j]);
    t.diff.push_back(sq_sum(dx - dy));
    if (with_ynorm) t.ynorm.push_back(sq_sum(dy));
  }
  return t;
}

// H1Loss::rel on CUDA by the fused kernels (h1_loss_fused.h): the forward in
// two kernels, the backward in one; saves x, y and the rows' gradient factors.
class H1RelFn : public torch::autograd::Function<H1RelFn> {
 public:
  // x, y: [..., *S] -> []
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& y, const std::vector<double>& h, double eps,
                               bool mean) {
    auto [loss, coef] = detail::fused_h1_rel_forward(x, y, h, eps, mean);
    ctx->save_for_backward({x, y, coef});
    ctx->saved_data["h"] = h;
    ctx->saved_data["mean"] = mean;
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = detail::fused_h1_rel_backward(saved[0], saved[1], saved[2], grads[0],
                                         ctx->saved_data["h"].toDoubleVector(),
                                         ctx->saved_data["mean"].toBool());
    }
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor H1Loss::abs(const torch::Tensor& x, const torch::Tensor& y,
                          std::vector<double> quadrature) const {
  check_inputs(x, y, options_.d(), "H1Loss");
  const auto q = quadrature_for(x, std::move(quadrature));
  const double c = product(q);
  auto t = h1_terms(x, y, options_, q, /*with_ynorm=*/false);
  auto out = c * t.diff[0];
  for (size_t j = 1; j < t.diff.size(); ++j) out = out + c * t.diff[j];
  return reduce_all(out.pow(0.5), options_.reduction());
}

torch::Tensor H1Loss::rel(const torch::Tensor& x, const torch::Tensor& y,
                          std::vector<double> quadrature) const {
  check_inputs(x, y, options_.d(), "H1Loss");
  const auto q = quadrature_for(x, std::move(quadrature));
  const bool periodic[3] = {options_.periodic_in_x(), options_.periodic_in_y(),
                            options_.periodic_in_z()};
  bool all_periodic = true;
  for (int64_t j = 0; j < options_.d(); ++j) all_periodic = all_periodic && periodic[j];
  // CUDA, fp32, periodic: three kernels in place of about seventy small ops.
  if (detail::fused_h1_rel_usable(x, y, options_.d(), all_periodic)) {
    return H1RelFn::apply(x, y, q, options_.eps(), options_.reduction() == Reduction::kMean);
  }
  auto t = h1_terms(x, y, options_, q, /*with_ynorm=*/true);
  auto num = t.diff[0];
  auto den = t.ynorm[0];
  for (size_t j = 1; j < t.diff.size(); ++j) {
    num = num + t.diff[j];
    den = den + t.ynorm[j];
  }
  return reduce_all(num.pow(0.5) / (den.pow(0.5) + options_.eps()), options_.reduction());
}

}  // namespace fno
