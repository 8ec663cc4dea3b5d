#include "gelu_fork_fused.h"

#include <fno/overrides.h>

#include <fno/fused.h>

#include <torch/torch.h>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/gelu_backward_sum.h"
#include "fused_common.h"
#endif

namespace fno::detail {

bool fused_gelu_backward_sum_usable(const torch::Tensor& x, const torch::Tensor& g1,
                                    const torch::Tensor& g2) {
#ifdef FNO_CUDA_KERNELS
  if (!fused_kernels_enabled() || !x.defined() || !g1.defined() || !g2.defined() || !x.is_cuda())
    return false;
  const auto t = x.scalar_type();
  const auto same = [&](const torch::Tensor& g) {
    return g.scalar_type() == t && g.device() == x.device() && g.sizes() == x.sizes();
  };
  const bool dtype = t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf;
  if (dtype && same(g1) && same(g2)) return true;
  fno::say_fallback("the fused GELU backward sum (gelu_fork)", c10::str(x.sizes(), " ", t),
                    dtype ? "the two gradients differ from x in shape, type or device"
                          : "the kernel takes fp32, bf16 and fp16");
  return false;
#else
  (void)x, (void)g1, (void)g2;
  return false;
#endif
}

torch::Tensor fused_gelu_backward_sum(const torch::Tensor& x, const torch::Tensor& g1,
                                      const torch::Tensor& g2) {
#ifdef FNO_CUDA_KERNELS
  TORCH_CHECK(fused_gelu_backward_sum_usable(x, g1, g2), "gelu_backward_sum: no kernel for x ",
              x.sizes(), " (", x.scalar_type(), "), gradients ", g1.sizes(), " (", g1.scalar_type(),
              ") and ", g2.sizes(), " (", g2.scalar_type(), ")");
  const c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous(), a = g1.contiguous(), b = g2.contiguous();
  auto dx = torch::empty_like(xc, at::MemoryFormat::Contiguous);
  const int err = cuda::gelu_backward_sum(
      kernel_dtype(xc), xc.data_ptr(), a.data_ptr(), b.data_ptr(), dx.data_ptr(), xc.numel(),
      c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == 0, "gelu_backward_sum: the kernel failed: ", cuda::error_string(err));
  return dx;
#else
  (void)x, (void)g1, (void)g2;
  TORCH_CHECK(false, "gelu_backward_sum: this build has no fused CUDA kernels");
#endif
}

}  // namespace fno::detail
