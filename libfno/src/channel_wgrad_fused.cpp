#include "channel_wgrad_fused.h"

#include <fno/overrides.h>

#include <fno/fused.h>

#include <torch/torch.h>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/channel_wgrad.h"
#include "fused_common.h"
#endif

namespace fno::detail {

bool fused_channel_wgrad_usable(const torch::Tensor& gw, const torch::Tensor& gy,
                                const torch::Tensor& h) {
#ifdef FNO_CUDA_KERNELS
  if (!fused_kernels_enabled() || !gy.defined() || !h.defined() || !gw.defined() || !gy.is_cuda() ||
      gy.dim() != 3 || h.dim() != 3 || gw.dim() != 2)
    return false;
  const auto t = gy.scalar_type();
  const auto fallback = [&](const std::string& why) {
    fno::say_fallback("the fused channel weight gradient (channel_wgrad)",
                      c10::str("gy ", gy.sizes(), " ", t, ", h ", h.sizes()), why);
    return false;
  };
  if (!(t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf) || h.scalar_type() != t ||
      gw.scalar_type() != torch::kFloat)
    return fallback("the kernel takes fp32, bf16 or fp16 activations of one type, fp32 weights");
  const auto dev = gy.device();
  const auto unit = [](const torch::Tensor& v) { return v.size(2) <= 1 || v.stride(2) == 1; };
  if (!(h.device() == dev && gw.device() == dev && gw.is_contiguous() && unit(gy) && unit(h) &&
        h.size(0) == gy.size(0) && h.size(2) == gy.size(2) && gw.size(0) == gy.size(1) &&
        gw.size(1) == h.size(1)))
    return fallback("the operands' devices, shapes or strides do not match the kernel's");
  if (!cuda::channel_wgrad_supported(gy.size(1), h.size(1))) {
    return fallback("no kernel for " + std::to_string(gy.size(1)) + " x " +
                    std::to_string(h.size(1)) + " channels");
  }
  return true;
#else
  (void)gw, (void)gy, (void)h;
  return false;
#endif
}

void fused_channel_wgrad_add(torch::Tensor& gw, const torch::Tensor& gy, const torch::Tensor& h) {
#ifdef FNO_CUDA_KERNELS
  TORCH_CHECK(fused_channel_wgrad_usable(gw, gy, h), "channel_wgrad: no kernel for gw ", gw.sizes(),
              " (", gw.scalar_type(), "), gy ", gy.sizes(), " (", gy.scalar_type(), "), h ",
              h.sizes(), " (", h.scalar_type(), ")");
  const c10::cuda::CUDAGuard guard(gy.device());
  const int64_t batch = gy.size(0), cout = gy.size(1), cin = h.size(1), n = gy.size(2);
  auto workspace = torch::empty({cuda::channel_wgrad_workspace(batch, n, cout, cin)},
                                gy.options().dtype(torch::kFloat));
  const int err = cuda::channel_wgrad(
      kernel_dtype(gy), {gy.data_ptr(), gy.stride(0), gy.stride(1)},
      {h.data_ptr(), h.stride(0), h.stride(1)}, batch, cout, cin, n, workspace.data_ptr<float>(),
      gw.data_ptr<float>(), c10::cuda::getCurrentCUDAStream(gy.device().index()).stream());
  TORCH_CHECK(err == 0, "channel_wgrad: the kernel failed: ", cuda::error_string(err));
#else
  (void)gw, (void)gy, (void)h;
  TORCH_CHECK(false, "channel_wgrad: this build has no fused CUDA kernels");
#endif
}

}  // namespace fno::detail
