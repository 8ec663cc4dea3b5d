#include "h1_loss_fused.h"

#include <fno/fused.h>

#include <torch/torch.h>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <fno/overrides.h>
#include "cuda/block_tail.h"  // error_string
#include "cuda/h1_loss.h"
#endif

namespace fno::detail {

#ifdef FNO_CUDA_KERNELS
namespace {

// FNO_FUSED_LOSS=0 (an experiment override, read once): the H1 loss runs the
// LibTorch path while the other fused kernels stay on.
bool loss_kernels_enabled() {
  static const bool on = fno::override_on("FNO_FUSED_LOSS");
  return on;
}

// The kernels' grid for the last d dims of x, with the steps h.
cuda::H1Grid grid_of(const torch::Tensor& x, const std::vector<double>& h) {
  const auto d = static_cast<int64_t>(h.size());
  cuda::H1Grid g{};
  g.dims = static_cast<int>(d);
  int64_t npts = 1;
  for (int k = 0; k < 3; ++k) {
    const int64_t j = k - (3 - d);  // the spatial dim, or < 0 for an unused axis
    g.n[k] = j < 0 ? 1 : x.size(x.dim() - d + j);
    // As the LibTorch path's `/ (2.0 * h)` on CUDA: times the float reciprocal.
    g.inv2h[k] = j < 0 ? 0.f : 1.0f / static_cast<float>(2.0 * h[j]);
    npts *= g.n[k];
  }
  g.rows = npts > 0 ? x.numel() / npts : 0;
  return g;
}

void check(int err, const char* what) {
  TORCH_CHECK(err == 0, "h1_loss: the fused ", what, " failed: ", cuda::error_string(err));
}

}  // namespace
#endif

bool fused_h1_rel_usable(const torch::Tensor& x, const torch::Tensor& y, int64_t d, bool periodic) {
#ifdef FNO_CUDA_KERNELS
  if (!fused_kernels_enabled() || !loss_kernels_enabled() || !x.defined() || !y.defined() ||
      !x.is_cuda() || d < 1 || d > 3 || x.dim() < d || x.numel() == 0)
    return false;
  const auto fallback = [&](const std::string& why) {
    fno::say_fallback("the fused H1 loss", c10::str(x.sizes(), " ", x.scalar_type()), why);
    return false;
  };
  if (!periodic) return fallback("a non-periodic grid (the kernels difference periodically)");
  if (x.scalar_type() != torch::kFloat || y.scalar_type() != torch::kFloat) {
    return fallback(c10::str("the kernels take fp32 (the target is ", y.scalar_type(), ")"));
  }
  if (y.device() != x.device() || y.sizes() != x.sizes()) {
    return fallback(c10::str("a target of ", y.sizes(), " on ", y.device()));
  }
  if (y.requires_grad()) return fallback("a target that requires a gradient");
  int64_t npts = 1;
  for (int64_t j = x.dim() - d; j < x.dim(); ++j) npts *= x.size(j);
  if (npts >= (int64_t{1} << 31)) return fallback("2^31 grid points or more");
  return true;
#else
  (void)x, (void)y, (void)d, (void)periodic;
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> fused_h1_rel_forward(const torch::Tensor& x,
                                                             const torch::Tensor& y,
                                                             const std::vector<double>& h,
                                                             double eps, bool mean) {
#ifdef FNO_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous(), yc = y.contiguous();
  const auto g = grid_of(xc, h);
  const auto f32 = x.options().dtype(torch::kFloat);
  auto workspace = torch::empty({cuda::h1_rel_workspace(g)}, f32);
  auto coef = torch::empty({g.rows}, f32);
  auto loss = torch::empty({}, f32);
  check(cuda::h1_rel_forward(xc.data_ptr<float>(), yc.data_ptr<float>(), g, static_cast<float>(eps),
                             mean, workspace.data_ptr<float>(), coef.data_ptr<float>(),
                             loss.data_ptr<float>(),
                             c10::cuda::getCurrentCUDAStream(x.device().index()).stream()),
        "forward");
  return {loss, coef};
#else
  (void)x, (void)y, (void)h, (void)eps, (void)mean;
  TORCH_CHECK(false, "h1_loss: this build has no fused CUDA kernels");
#endif
}

torch::Tensor fused_h1_rel_backward(const torch::Tensor& x, const torch::Tensor& y,
                                    const torch::Tensor& coef, const torch::Tensor& grad,
                                    const std::vector<double>& h, bool mean) {
#ifdef FNO_CUDA_KERNELS
  TORCH_CHECK(grad.numel() == 1 && grad.device() == x.device(),
              "h1_loss: the upstream gradient must be one value on ", x.device(), ", got ",
              grad.sizes(), " on ", grad.device());
  const c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous(), yc = y.contiguous();
  const auto gc = grad.to(torch::kFloat).contiguous();
  const auto g = grid_of(xc, h);
  auto dx = torch::empty_like(xc, at::MemoryFormat::Contiguous);
  check(cuda::h1_rel_backward(xc.data_ptr<float>(), yc.data_ptr<float>(), g, coef.data_ptr<float>(),
                              gc.data_ptr<float>(), mean, dx.data_ptr<float>(),
                              c10::cuda::getCurrentCUDAStream(x.device().index()).stream()),
        "backward");
  return dx;
#else
  (void)x, (void)y, (void)coef, (void)grad, (void)h, (void)mean;
  TORCH_CHECK(false, "h1_loss: this build has no fused CUDA kernels");
#endif
}

}  // namespace fno::detail
