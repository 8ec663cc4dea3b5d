#include "block_tail_fused.h"

#include <fno/fused.h>

#include <torch/torch.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include <fno/overrides.h>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/block_tail.h"
#include "cuda/channel_mlp.h"
#include "fused_common.h"
#endif

namespace fno {

namespace {
// -1: FNO_FUSED not read yet; else 0 or 1.
std::atomic<int> g_fused{-1};
// -1: FNO_BLOCK_TAIL_FP32 not read yet; else an Fp32BlockTail.
std::atomic<int> g_fp32{-1};
}  // namespace

bool fused_kernels_compiled() {
#ifdef FNO_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool fused_kernels_enabled() {
  int state = g_fused.load(std::memory_order_relaxed);
  if (state < 0) {
    const int from_env = fno::override_on("FNO_FUSED") ? 1 : 0;
    g_fused.compare_exchange_strong(state, from_env);
    state = g_fused.load(std::memory_order_relaxed);
  }
  return state == 1 && fused_kernels_compiled();
}

void set_fused_kernels_enabled(bool enabled) { g_fused.store(enabled ? 1 : 0); }

Fp32BlockTail fp32_block_tail() {
  int state = g_fp32.load(std::memory_order_relaxed);
  if (state < 0) {
    const char* env = fno::override_value("FNO_BLOCK_TAIL_FP32");
    const auto from_env = (env != nullptr && std::strcmp(env, "3xtf32") == 0)
                              ? Fp32BlockTail::k3xTF32
                              : Fp32BlockTail::kFFMA;
    g_fp32.compare_exchange_strong(state, static_cast<int>(from_env));
    state = g_fp32.load(std::memory_order_relaxed);
  }
  return static_cast<Fp32BlockTail>(state);
}

void set_fp32_block_tail(Fp32BlockTail mode) { g_fp32.store(static_cast<int>(mode)); }

bool block_tail_packed() {
#ifdef FNO_CUDA_KERNELS
  return cuda::block_tail_tuning().packed;
#else
  return false;
#endif
}

void set_block_tail_packed(bool packed) {
#ifdef FNO_CUDA_KERNELS
  auto t = cuda::block_tail_tuning();
  t.packed = packed;
  cuda::set_block_tail_tuning(t);
#else
  (void)packed;
#endif
}

#ifdef FNO_CUDA_KERNELS
namespace {
// Says on stderr, once per (channels, mid) in the process, that blocks of
// that shape run the LibTorch path for want of a compiled kernel (and whether
// their channel MLP runs the fused channel-MLP kernels there).
void say_no_kernel(int64_t channels, int64_t mid) {
  static std::mutex mutex;
  static std::set<std::pair<int64_t, int64_t>> said;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!said.emplace(channels, mid).second) return;
  }
  std::ostringstream line;
  line << "fno: the fused block tail has no kernel for hidden_channels=" << channels
       << ", channel MLP width " << mid << " (compiled: " << cuda::kCompiledChannels << "/"
       << cuda::kCompiledMid << "); those blocks run the LibTorch path"
       << (cuda::channel_mlp_supported(channels, mid, channels) ? ", their channel MLP fused" : "")
       << "\n";
  std::cerr << line.str() << std::flush;
}
}  // namespace
#endif

bool fused_block_tail_applies(const torch::Tensor& x, int64_t channels, int64_t mid) {
#ifdef FNO_CUDA_KERNELS
  const auto t = x.scalar_type();
  if (!(fused_kernels_enabled() && x.defined() && x.is_cuda() && x.dim() >= 3 &&
        x.size(1) == channels &&
        (t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf)))
    return false;
  // A shape without a kernel is not refused (the LibTorch path computes the
  // same block), but never passed over in silence.
  if (cuda::block_tail_supported(channels, mid)) return true;
  say_no_kernel(channels, mid);
  return false;
#else
  (void)x;
  (void)channels;
  (void)mid;
  return false;
#endif
}

namespace detail {

#ifdef FNO_CUDA_KERNELS
namespace {

struct Weights {
  torch::Tensor w_skip, w1, b1, w2, b2, gate;
  Weights(const torch::Tensor& ws, const torch::Tensor& w1_, const torch::Tensor& b1_,
          const torch::Tensor& w2_, const torch::Tensor& b2_, const torch::Tensor& g)
      : w_skip(f32(ws)), w1(f32(w1_)), b1(f32(b1_)), w2(f32(w2_)), b2(f32(b2_)), gate(f32(g)) {}
  cuda::BlockTailWeights ptrs() const {
    return {w_skip.data_ptr<float>(), w1.data_ptr<float>(), b1.data_ptr<float>(),
            w2.data_ptr<float>(),     b2.data_ptr<float>(), gate.data_ptr<float>()};
  }
};

// How fp32 activations run: on TF32 tensor cores where TF32 is allowed, as
// fp32 GEMMs do (fno::MatmulPrecisionGuard sets this for --precision tf32);
// else in 3xTF32 or FFMA (fp32_block_tail()).
cuda::Fp32Math fp32_math() {
  if (at::globalContext().allowTF32CuBLAS()) return cuda::Fp32Math::kTf32;
  return fp32_block_tail() == Fp32BlockTail::kFFMA ? cuda::Fp32Math::kFfma
                                                   : cuda::Fp32Math::k3xTf32;
}

void check(int err, const char* what) {
  TORCH_CHECK(err == 0, "block_tail: the fused ", what, " failed: ", cuda::error_string(err));
}

// The backward's outputs, to be written: da, ds like the activations `act`
// [B, C, N], the weight gradients in fp32 (cm: the channel MLP's width).
BlockTailGradients empty_grads(const torch::Tensor& act, int64_t cm) {
  const int64_t c = act.size(1);
  const auto f32opts = act.options().dtype(torch::kFloat);
  BlockTailGradients g;
  g.da = torch::empty_like(act);
  g.ds = torch::empty_like(act);
  g.w_skip = torch::empty({c, c}, f32opts);
  g.w1 = torch::empty({cm, c}, f32opts);
  g.b1 = torch::empty({cm}, f32opts);
  g.w2 = torch::empty({c, cm}, f32opts);
  g.b2 = torch::empty({c}, f32opts);
  g.gate = torch::empty({c}, f32opts);
  return g;
}

cuda::BlockTailGrads grad_ptrs(const BlockTailGradients& g) {
  return {g.w_skip.data_ptr<float>(), g.w1.data_ptr<float>(), g.b1.data_ptr<float>(),
          g.w2.data_ptr<float>(),     g.b2.data_ptr<float>(), g.gate.data_ptr<float>()};
}

// The weight gradients shaped (and, off the precision contract, typed) as the
// parameters given.
void shape_like(BlockTailGradients& g, const torch::Tensor& w_skip, const torch::Tensor& w1,
                const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                const torch::Tensor& gate) {
  const auto like = [](const torch::Tensor& grad, const torch::Tensor& p) {
    return grad.view(p.sizes()).to(p.scalar_type());
  };
  g.w_skip = like(g.w_skip, w_skip);
  g.w1 = like(g.w1, w1);
  g.b1 = like(g.b1, b1);
  g.w2 = like(g.w2, w2);
  g.b2 = like(g.b2, b2);
  g.gate = like(g.gate, gate);
}

}  // namespace
#endif

bool fused_block_tail_usable(const torch::Tensor& a, const torch::Tensor& s,
                             const torch::Tensor& w_skip, const torch::Tensor& w1,
                             const torch::Tensor& b1, const torch::Tensor& w2,
                             const torch::Tensor& b2, const torch::Tensor& gate) {
#ifdef FNO_CUDA_KERNELS
  if (!a.defined() || a.dim() != 3 || !w1.defined() || w1.dim() != 2) return false;
  const int64_t c = a.size(1), cm = w1.size(0);
  if (!fused_block_tail_applies(a, c, cm)) return false;
  const auto dev = a.device();
  const auto on_dev = [&](const torch::Tensor& t) {
    return t.defined() && t.device() == dev && t.is_floating_point();
  };
  return s.defined() && s.sizes() == a.sizes() && s.scalar_type() == a.scalar_type() &&
         s.device() == dev && a.is_contiguous() && s.is_contiguous() && on_dev(w_skip) &&
         on_dev(w1) && on_dev(b1) && on_dev(w2) && on_dev(b2) && on_dev(gate) &&
         w_skip.sizes() == torch::IntArrayRef{c, c} && w1.sizes() == torch::IntArrayRef{cm, c} &&
         b1.numel() == cm && w2.sizes() == torch::IntArrayRef{c, cm} && b2.numel() == c &&
         gate.numel() == c;
#else
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> fused_block_tail_forward(
    const torch::Tensor& a, const torch::Tensor& s, const torch::Tensor& w_skip,
    const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
    const torch::Tensor& b2, const torch::Tensor& gate, bool gelu_mid) {
#ifdef FNO_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(a.device());
  const Weights w(w_skip, w1, b1, w2, b2, gate);
  auto z = torch::empty_like(a), y1 = torch::empty_like(a);
  check(cuda::block_tail_forward(
            kernel_dtype(a), a.data_ptr(), s.data_ptr(), z.data_ptr(), y1.data_ptr(), a.size(0),
            a.size(1), w1.size(0), a.size(2), w.ptrs(), gelu_mid,
            c10::cuda::getCurrentCUDAStream(a.device().index()).stream(), fp32_math()),
        "forward");
  return {z, y1};
#else
  TORCH_CHECK(false, "block_tail: this build has no fused CUDA kernels");
#endif
}

BlockTailGradients fused_block_tail_backward(const torch::Tensor& dz_in, const torch::Tensor& in,
                                             const torch::Tensor& y1, const torch::Tensor& w_skip,
                                             const torch::Tensor& w1, const torch::Tensor& b1,
                                             const torch::Tensor& w2, const torch::Tensor& b2,
                                             const torch::Tensor& gate, bool gelu_input,
                                             bool gelu_mid) {
#ifdef FNO_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(in.device());
  const auto dz = dz_in.to(in.scalar_type()).contiguous();
  const Weights w(w_skip, w1, b1, w2, b2, gate);
  const int64_t batch = in.size(0), c = in.size(1), cm = w1.size(0), n = in.size(2);
  BlockTailGradients g = empty_grads(in, cm);
  auto workspace = torch::empty({cuda::block_tail_backward_workspace(batch, c, cm, n)},
                                in.options().dtype(torch::kFloat));
  const cuda::BlockTailGrads out = grad_ptrs(g);
  check(cuda::block_tail_backward(kernel_dtype(in), dz.data_ptr(), in.data_ptr(), y1.data_ptr(),
                                  g.da.data_ptr(), g.ds.data_ptr(), batch, c, cm, n, w.ptrs(), out,
                                  gelu_input, gelu_mid, workspace.data_ptr<float>(),
                                  c10::cuda::getCurrentCUDAStream(in.device().index()).stream(),
                                  fp32_math()),
        "backward");
  shape_like(g, w_skip, w1, b1, w2, b2, gate);
  return g;
#else
  TORCH_CHECK(false, "block_tail: this build has no fused CUDA kernels");
#endif
}

torch::Tensor fused_block_tail_next(const torch::Tensor& a, const torch::Tensor& s,
                                    const torch::Tensor& w_skip, const torch::Tensor& w1,
                                    const torch::Tensor& b1, const torch::Tensor& w2,
                                    const torch::Tensor& b2, const torch::Tensor& gate,
                                    bool gelu_mid) {
#ifdef FNO_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(a.device());
  const Weights w(w_skip, w1, b1, w2, b2, gate);
  auto out = torch::empty_like(a);
  check(cuda::block_tail_forward_next(
            kernel_dtype(a), a.data_ptr(), s.data_ptr(), out.data_ptr(), a.size(0), a.size(1),
            w1.size(0), a.size(2), w.ptrs(), gelu_mid,
            c10::cuda::getCurrentCUDAStream(a.device().index()).stream(), fp32_math()),
        "forward (next block's input)");
  return out;
#else
  TORCH_CHECK(false, "block_tail: this build has no fused CUDA kernels");
#endif
}

BlockTailGradients fused_block_tail_backward_recompute(
    const torch::Tensor& g_in, const torch::Tensor& a, const torch::Tensor& s,
    const torch::Tensor& w_skip, const torch::Tensor& w1, const torch::Tensor& b1,
    const torch::Tensor& w2, const torch::Tensor& b2, const torch::Tensor& gate, bool gelu_mid) {
#ifdef FNO_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(a.device());
  const auto g_out = g_in.to(a.scalar_type()).contiguous();
  const Weights w(w_skip, w1, b1, w2, b2, gate);
  const int64_t batch = a.size(0), c = a.size(1), cm = w1.size(0), n = a.size(2);
  BlockTailGradients g = empty_grads(a, cm);
  auto workspace = torch::empty({cuda::block_tail_backward_workspace(batch, c, cm, n)},
                                a.options().dtype(torch::kFloat));
  const cuda::BlockTailGrads out = grad_ptrs(g);
  check(cuda::block_tail_backward_recompute(
            kernel_dtype(a), g_out.data_ptr(), a.data_ptr(), s.data_ptr(), g.da.data_ptr(),
            g.ds.data_ptr(), batch, c, cm, n, w.ptrs(), out, gelu_mid, workspace.data_ptr<float>(),
            c10::cuda::getCurrentCUDAStream(a.device().index()).stream(), fp32_math()),
        "backward (recomputing)");
  shape_like(g, w_skip, w1, b1, w2, b2, gate);
  return g;
#else
  TORCH_CHECK(false, "block_tail: this build has no fused CUDA kernels");
#endif
}

}  // namespace detail
}  // namespace fno
