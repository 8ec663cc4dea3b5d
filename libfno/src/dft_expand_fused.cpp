#include "dft_expand_fused.h"

#include <fno/fused.h>

#include <torch/torch.h>

#include <fno/overrides.h>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/block_tail.h"  // error_string
#include "cuda/dft_expand.h"
#endif

namespace fno::detail {

bool dft_expand_usable(const torch::Tensor& mat) {
#ifdef FNO_CUDA_KERNELS
  static const bool on = fno::override_on("FNO_DFT_EXPAND");
  if (!(on && fused_kernels_enabled() && mat.defined() && mat.is_cuda() &&
        mat.scalar_type() == torch::kFloat && mat.dim() == 2))
    return false;
  const auto fallback = [&](const char* why) {
    fno::say_fallback(
        "the fused DFT expansion (dft_expand)",
        "a " + std::to_string(mat.size(0)) + " x " + std::to_string(mat.size(1)) + " matrix", why);
    return false;
  };
  if (!cuda::dft_expand_supported(mat.size(0), mat.size(1))) {
    return fallback(
        "no kernel for this size (compiled: 2k in {16, 18, 24, 32} rows; columns a multiple of 4, "
        "at most 1024)");
  }
  if (!mat.is_contiguous() || reinterpret_cast<uintptr_t>(mat.data_ptr()) % 16 != 0) {
    return fallback("the matrix is not contiguous and 16-byte aligned");
  }
  return true;
#else
  (void)mat;
  return false;
#endif
}

bool dft_expand_usable(const torch::Tensor& x, const torch::Tensor& mat) {
  return dft_expand_usable(mat) && x.defined() && x.scalar_type() == torch::kFloat &&
         x.device() == mat.device() && x.dim() >= 1 && x.size(-1) == mat.size(0);
}

torch::Tensor dft_expand(const torch::Tensor& x, const torch::Tensor& mat) {
#ifdef FNO_CUDA_KERNELS
  TORCH_CHECK(dft_expand_usable(x, mat), "dft_expand: no kernel for x ", x.sizes(), " (",
              x.scalar_type(), ") @ ", mat.sizes(), " (", mat.scalar_type(), ")");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  if (reinterpret_cast<uintptr_t>(xc.data_ptr()) % 8 != 0) xc = xc.clone();
  auto shape = x.sizes().vec();
  shape.back() = mat.size(1);
  auto y = torch::empty(shape, x.options().memory_format(at::MemoryFormat::Contiguous));
  const int err = cuda::dft_expand(xc.data_ptr<float>(), mat.data_ptr<float>(), y.data_ptr<float>(),
                                   xc.numel() / mat.size(0), mat.size(0), mat.size(1),
                                   c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == 0, "dft_expand: the kernel failed: ", cuda::error_string(err));
  return y;
#else
  (void)x, (void)mat;
  TORCH_CHECK(false, "dft_expand: this build has no fused CUDA kernels");
#endif
}

}  // namespace fno::detail
