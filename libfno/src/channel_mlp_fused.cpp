#include "channel_mlp_fused.h"

#include <fno/fused.h>

#include <torch/torch.h>

#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <fno/overrides.h>
#include "cuda/channel_mlp.h"
#include "fused_common.h"
#endif

namespace fno::detail {

#ifdef FNO_CUDA_KERNELS
namespace {

// Says on stderr, once per shape in the process, that channel MLPs of that
// shape run the LibTorch path for want of a compiled kernel.
void say_no_kernel(int64_t in, int64_t mid, int64_t out) {
  static std::mutex mutex;
  static std::set<std::tuple<int64_t, int64_t, int64_t>> said;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!said.emplace(in, mid, out).second) return;
  }
  std::ostringstream line;
  line << "fno: the fused channel MLP has no kernel for " << in << " -> " << mid << " -> " << out
       << " channels (compiled:";
  const char* sep = " ";
  for (const auto& c : cuda::kCompiledChannelMlps) {
    line << sep << c.in << " -> " << c.out;
    sep = ", ";
  }
  line << "; hidden width up to " << cuda::kMaxChannelMlpMid << "); it runs the LibTorch path\n";
  std::cerr << line.str() << std::flush;
}

// FNO_FUSED_MLP=0 (an experiment override, read once): the channel MLPs run
// the LibTorch path while the block tail stays fused.
bool mlp_kernels_enabled() {
  static const bool on = fno::override_on("FNO_FUSED_MLP");
  return on;
}

// FNO_FUSED_MLP_BACKWARD=0 (an experiment override, read once): the channel
// MLPs' backward writes GELU(h) and dh for weight-gradient GEMMs, as before
// the one-pass kernel, to measure one against the other in one process.
bool one_pass_backward_enabled() {
  static const bool on = fno::override_on("FNO_FUSED_MLP_BACKWARD");
  return on;
}

cuda::ChannelMlpInput operand(const torch::Tensor& t) {
  return {t.data_ptr(), t.stride(0), t.stride(1)};
}

void check(int err, const char* what) {
  TORCH_CHECK(err == 0, "channel_mlp: the fused ", what, " failed: ", cuda::error_string(err));
}

struct Weights {
  torch::Tensor w1, b1, w2, b2;
  cuda::ChannelMlpWeights ptrs() const {
    const auto ptr = [](const torch::Tensor& t) {
      return t.defined() ? t.data_ptr<float>() : static_cast<const float*>(nullptr);
    };
    return {ptr(w1), ptr(b1), ptr(w2), ptr(b2)};
  }
};
// dy [B, Cout, N] of x's dtype, unit stride along N, for x [B, Cin, N] and w2 [Cout, Cmid].
void check_gradient(const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& w2) {
  TORCH_CHECK(dy.scalar_type() == x.scalar_type() && dy.dim() == 3 && dy.size(0) == x.size(0) &&
                  dy.size(1) == w2.size(0) && dy.size(2) == x.size(2) &&
                  (dy.size(2) <= 1 || dy.stride(2) == 1),
              "channel_mlp: the gradient ", dy.sizes(), " (", dy.scalar_type(),
              ") does not fit the input ", x.sizes(), " (", x.scalar_type(), ")");
}

Weights fp32_weights(const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
                     const torch::Tensor& b2) {
  const auto opt = [](const torch::Tensor& t) { return t.defined() ? f32(t) : t; };
  return {f32(w1), opt(b1), f32(w2), opt(b2)};
}

}  // namespace
#endif

bool fused_channel_mlp_usable(const torch::Tensor& x, const torch::Tensor& w1,
                              const torch::Tensor& b1, const torch::Tensor& w2,
                              const torch::Tensor& b2, bool say_missing) {
#ifdef FNO_CUDA_KERNELS
  if (!fused_kernels_enabled() || !mlp_kernels_enabled() || !x.defined() || !x.is_cuda() ||
      x.dim() != 3 || !w1.defined() || !w2.defined() || w1.dim() != 2 || w2.dim() != 2)
    return false;
  const auto t = x.scalar_type();
  if (!(t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf)) return false;
  const int64_t in = x.size(1), mid = w1.size(0), out = w2.size(0);
  const auto dev = x.device();
  const auto fits = [&](const torch::Tensor& b, int64_t size) {
    return !b.defined() || (b.device() == dev && b.numel() == size && b.is_floating_point());
  };
  if (!(w1.size(1) == in && w2.size(1) == mid && w1.device() == dev && w2.device() == dev &&
        w1.is_floating_point() && w2.is_floating_point() && fits(b1, mid) && fits(b2, out) &&
        (x.size(2) <= 1 || x.stride(2) == 1)))
    return false;
  if (cuda::channel_mlp_supported(in, mid, out)) return true;
  if (say_missing) say_no_kernel(in, mid, out);
  return false;
#else
  (void)x, (void)w1, (void)b1, (void)w2, (void)b2, (void)say_missing;
  return false;
#endif
}

torch::Tensor fused_channel_mlp_forward(const torch::Tensor& x, const torch::Tensor& w1,
                                        const torch::Tensor& b1, const torch::Tensor& w2,
                                        const torch::Tensor& b2, bool gelu_input) {
#ifdef FNO_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(x.device());
  const auto w = fp32_weights(w1, b1, w2, b2);
  auto y = torch::empty({x.size(0), w2.size(0), x.size(2)}, x.options());
  check(cuda::channel_mlp_forward(kernel_dtype(x), operand(x), y.data_ptr(), x.size(0), x.size(1),
                                  w1.size(0), w2.size(0), x.size(2), w.ptrs(), gelu_input,
                                  c10::cuda::getCurrentCUDAStream(x.device().index()).stream()),
        "forward");
  return y;
#else
  (void)x, (void)w1, (void)b1, (void)w2, (void)b2, (void)gelu_input;
  TORCH_CHECK(false, "channel_mlp: this build has no fused CUDA kernels");
#endif
}

std::pair<torch::Tensor, torch::Tensor> fused_channel_mlp_hidden_grad(
    const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& w1,
    const torch::Tensor& b1, const torch::Tensor& w2, bool gelu_input) {
#ifdef FNO_CUDA_KERNELS
  check_gradient(x, dy, w2);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto w = fp32_weights(w1, b1, w2, torch::Tensor());
  const int64_t mid = w1.size(0);
  auto g = torch::empty({x.size(0), mid, x.size(2)}, x.options());
  auto dh = torch::empty_like(g);
  check(cuda::channel_mlp_hidden_grad(kernel_dtype(x), operand(x), operand(dy), g.data_ptr(),
                                      dh.data_ptr(), x.size(0), x.size(1), mid, w2.size(0),
                                      x.size(2), w.ptrs(), gelu_input,
                                      c10::cuda::getCurrentCUDAStream(x.device().index()).stream()),
        "backward");
  return {g, dh};
#else
  (void)x, (void)dy, (void)w1, (void)b1, (void)w2, (void)gelu_input;
  TORCH_CHECK(false, "channel_mlp: this build has no fused CUDA kernels");
#endif
}

bool fused_channel_mlp_backward_usable(const torch::Tensor& x, const torch::Tensor& dy,
                                       const torch::Tensor& w1, const torch::Tensor& b1,
                                       const torch::Tensor& w2, const torch::Tensor& b2,
                                       bool say_missing) {
#ifdef FNO_CUDA_KERNELS
  return one_pass_backward_enabled() && dy.defined() && dy.scalar_type() == x.scalar_type() &&
         fused_channel_mlp_usable(x, w1, b1, w2, b2, say_missing) &&
         cuda::channel_mlp_backward_supported(x.size(1), w1.size(0), w2.size(0));
#else
  (void)x, (void)dy, (void)w1, (void)b1, (void)w2, (void)b2, (void)say_missing;
  return false;
#endif
}

ChannelMLP2Grads fused_channel_mlp_backward(const torch::Tensor& x, const torch::Tensor& dy,
                                            const torch::Tensor& w1, const torch::Tensor& b1,
                                            const torch::Tensor& w2, const torch::Tensor& b2,
                                            bool gelu_input, bool need_dx) {
#ifdef FNO_CUDA_KERNELS
  check_gradient(x, dy, w2);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto w = fp32_weights(w1, b1, w2, torch::Tensor());
  const int64_t batch = x.size(0), in = x.size(1), mid = w1.size(0), out = w2.size(0),
                n = x.size(2);
  const auto f32_like = [](const torch::Tensor& t) {
    return t.defined() ? torch::empty(t.sizes(), t.options().dtype(torch::kFloat)) : t;
  };
  ChannelMLP2Grads g{need_dx ? torch::empty({batch, in, n}, x.options()) : torch::Tensor(),
                     f32_like(w1), f32_like(b1), f32_like(w2), f32_like(b2)};
  auto workspace = torch::empty({cuda::channel_mlp_backward_workspace(batch, in, mid, out, n)},
                                x.options().dtype(torch::kFloat));
  const auto ptr = [](const torch::Tensor& t) {
    return t.defined() ? t.data_ptr<float>() : static_cast<float*>(nullptr);
  };
  check(cuda::channel_mlp_backward(kernel_dtype(x), operand(x), operand(dy),
                                   need_dx ? g.dx.data_ptr() : nullptr, batch, in, mid, out, n,
                                   w.ptrs(), gelu_input, workspace.data_ptr<float>(),
                                   {ptr(g.w1), ptr(g.b1), ptr(g.w2), ptr(g.b2)},
                                   c10::cuda::getCurrentCUDAStream(x.device().index()).stream()),
        "backward");
  // In the parameters' dtype (a no-op for the fp32 masters).
  const auto as = [](torch::Tensor& grad, const torch::Tensor& param) {
    if (grad.defined()) grad = grad.to(param.scalar_type());
  };
  as(g.w1, w1), as(g.b1, b1), as(g.w2, w2), as(g.b2, b2);
  return g;
#else
  (void)x, (void)dy, (void)w1, (void)b1, (void)w2, (void)b2, (void)gelu_input, (void)need_dx;
  TORCH_CHECK(false, "channel_mlp: this build has no fused CUDA kernels");
#endif
}

}  // namespace fno::detail
