// The autograd functions of an FNO's pointwise parts (fno/layers.h):
// pointwise_linear, channel_mlp2 and its backward, block_tail and gelu_fork,
// each one node whose backward computes its gradients directly (the fused
// CUDA kernels where compiled for the shape, else LibTorch's batched GEMMs),
// and the thread's activation-memory modes they read (RecomputeCheapGuard,
// detail::WholeBatchBytesGuard). The modules that call them are in layers.cpp.
#include <fno/layers.h>

#include <fno/fused.h>
#include "block_tail_fused.h"
#include "channel_mlp_fused.h"
#include "channel_wgrad_fused.h"
#include "gelu_fork_fused.h"
#include "whole_batch.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <tuple>

namespace fno {

namespace {

// Mixed precision (fno/precision.h): activations arrive in the compute type
// (fp32, bf16 or fp16), weights as their fp32 masters. A weight is cast to the
// activations' type where a GEMM reads it (a few KiB), and its gradient is
// accumulated in the weight's own type, so the functions below return fp32
// weight gradients whatever the activations' type.
torch::Tensor like(const torch::Tensor& w, const torch::Tensor& x) {
  return (!w.defined() || w.scalar_type() == x.scalar_type()) ? w : w.to(x.scalar_type());
}

// g += a b over 2-d operands, accumulated in g's type: a GEMM with an fp32
// output for bf16/fp16 operands on CUDA (cuBLAS accumulates in fp32 anyway),
// operands cast up on the CPU.
void addmm_acc(torch::Tensor& g, const torch::Tensor& a, const torch::Tensor& b) {
  const auto acc = g.scalar_type();
  if (a.scalar_type() == acc) {
    g.addmm_(a, b);
  } else if (a.is_cuda()) {
    g.add_(at::mm(a, b, acc));
  } else {
    g.addmm_(a.to(acc), b.to(acc));
  }
}

// g += sum over dims {0, 2} of t ([B, C, N] -> [C]), summed in g's type: the
// grid first (a reduction along contiguous memory), then the batch.
void add_channel_sum(torch::Tensor& g, const torch::Tensor& t) {
  g.add_(t.sum(2, false, g.scalar_type()).sum(0));
}

// gw += sum_b gy_b h_b^T: [Cout, Cin], accumulated in gw's type. On CUDA a
// kernel (cuda/channel_wgrad.h) spreads the reduction over batch and grid,
// where a batched GEMM has one [Cout, Cin] output tile per entry and leaves
// most of the GPU idle over reductions as long as the grid.
void add_wgrad(torch::Tensor& gw, const torch::Tensor& gy, const torch::Tensor& h) {
  if (detail::fused_channel_wgrad_usable(gw, gy, h)) {
    detail::fused_channel_wgrad_add(gw, gy, h);
  } else if (gy.size(0) == 1) {
    addmm_acc(gw, gy[0], h[0].t());
  } else if (gy.scalar_type() == gw.scalar_type()) {
    gw.add_(torch::bmm(gy, h.transpose(1, 2)).sum(0));
  } else if (gy.is_cuda()) {
    gw.add_(at::bmm(gy, h.transpose(1, 2), gw.scalar_type()).sum(0));
  } else {
    gw.add_(torch::bmm(gy.to(gw.scalar_type()), h.transpose(1, 2).to(gw.scalar_type())).sum(0));
  }
}

// Grid sizes from which backward may work per batch entry (recomputed layers
// one entry at a time, so the transient is one entry's), and the channel MLPs
// make their hidden layers per entry and in spatial chunks (over_grid): when a
// layer of `width` channels over the batch takes more than
// whole_batch_bytes() (whole_batch.h).
constexpr int64_t kPerEntry = int64_t{1} << 16;

std::atomic<int64_t> g_whole_batch_bytes{detail::kWholeBatchBytes};

// x: [B, C, N]
bool per_entry(const torch::Tensor& x, int64_t width) {
  const int64_t n = x.size(2);
  return n >= kPerEntry && x.size(0) * width * n * static_cast<int64_t>(x.element_size()) >
                               detail::whole_batch_bytes();
}

// y = W x + b over the channel dim, as explicit GEMMs with a hand-written
// backward. Measured on an H200 (bench/micro_ops.py, [8, C, 1024^2], fwd+bwd):
// this is on par with cuDNN's 1x1 conv1d for C -> C and 20x faster for C -> 1,
// while torch::matmul (transposed copies) and an expanded-weight bmm backward
// (one [Cout, Cin] output tile per batch entry over a 1M-long reduction) are
// 3-8x slower.
class PointwiseLinearFn : public torch::autograd::Function<PointwiseLinearFn> {
 public:
  // y = W act(x) + b, act = GELU when `gelu`, else the identity.
  // x: [B, Cin, N], w: [Cout, Cin], b: [Cout] or none -> [B, Cout, N]
  // With GELU, only the pre-activation x is kept for backward and GELU(x) is
  // recomputed there (one elementwise pass): the activation, as large as x, is
  // never stored. In an FNO that removes one saved tensor per GELU.
  // r: [B, Cout, N] or none, added by the GEMM (beta = 1); its gradient is gy.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, const std::optional<torch::Tensor>& b,
                               bool gelu, const std::optional<torch::Tensor>& r) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = b.has_value();
    ctx->saved_data["gelu"] = gelu;
    ctx->saved_data["has_residual"] = r.has_value();
    const auto h = gelu ? torch::gelu(x) : x;
    const auto wb = like(w, x).unsqueeze(0).expand({x.size(0), -1, -1});
    if (r.has_value()) {
      auto y = torch::baddbmm(*r, wb, h);
      return b.has_value() ? y.add_(like(*b, x).view({1, -1, 1})) : y;
    }
    return b.has_value() ? torch::baddbmm(like(*b, x).view({1, -1, 1}), wb, h) : torch::bmm(wb, h);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    const bool gelu = ctx->saved_data["gelu"].toBool();
    const auto gy = grads[0].contiguous();
    torch::Tensor gx, gw, gb;
    const bool long_reduction = per_entry(x, std::max(x.size(1), w.size(0)));
    if (ctx->needs_input_grad(0)) {
      gx = torch::bmm(like(w, x).t().unsqueeze(0).expand({x.size(0), -1, -1}), gy);
      // Long grids: the GELU backward runs per batch entry, in place, below.
      if (gelu && !long_reduction) gx = at::gelu_backward(gx, x);
    }
    if (long_reduction && (ctx->needs_input_grad(1) || (gelu && gx.defined()))) {
      // Per batch entry: the entry's weight gradient added into gw (add_wgrad),
      // with GELU(x) recomputed for that entry only, so the transient is one
      // entry's activation rather than the batch's.
      if (ctx->needs_input_grad(1)) gw = torch::zeros_like(w);
      for (int64_t i = 0; i < x.size(0); ++i) {
        const auto xi = x[i];
        if (gw.defined()) {
          add_wgrad(gw, gy.narrow(0, i, 1), (gelu ? torch::gelu(xi) : xi).unsqueeze(0));
        }
        if (gelu && gx.defined()) {
          auto gxi = gx[i];
          at::gelu_backward_out(gxi, gxi, xi);
        }
      }
    } else if (ctx->needs_input_grad(1)) {
      // Short grids: the whole batch at once (add_wgrad).
      const auto h = gelu ? torch::gelu(x) : x;
      gw = torch::zeros_like(w);
      add_wgrad(gw, gy, h);
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      gb = torch::zeros({gy.size(1)}, w.options());
      add_channel_sum(gb, gy);
    }
    // needs_input_grad counts the tensors given: x, w, then b and r when present.
    torch::Tensor gr;
    const size_t r_edge = ctx->saved_data["has_bias"].toBool() ? 3 : 2;
    if (ctx->saved_data["has_residual"].toBool() && ctx->needs_input_grad(r_edge)) gr = gy;
    return {gx, gw, gb, torch::Tensor(), gr};
  }
};

}  // namespace

torch::Tensor pointwise_linear(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool gelu_input,
                               const torch::Tensor& residual) {
  TORCH_CHECK(x.dim() >= 3, "pointwise_linear: expected input [B, C, *S], got shape ", x.sizes());
  TORCH_CHECK(weight.dim() == 3 && weight.size(2) == 1 && x.size(1) == weight.size(1),
              "pointwise_linear: weight ", weight.sizes(), " does not fit input ", x.sizes());
  auto out_shape = x.sizes().vec();
  out_shape[1] = weight.size(0);
  // x: [B, Cin, *S] -> [B, Cin, N] -> [B, Cout, N] -> [B, Cout, *S]
  const auto b = bias.defined() ? std::optional<torch::Tensor>(bias.view({-1})) : std::nullopt;
  std::optional<torch::Tensor> r;
  if (residual.defined()) {
    TORCH_CHECK(residual.sizes() == torch::IntArrayRef(out_shape), "pointwise_linear: residual ",
                residual.sizes(), " does not match the output ", torch::IntArrayRef(out_shape));
    r = residual.flatten(2).contiguous();
  }
  return PointwiseLinearFn::apply(x.flatten(2).contiguous(), weight.squeeze(-1), b, gelu_input, r)
      .view(out_shape);
}

// ---------------------------------------------------------------------------
// Activation memory: store the expensive, recompute the cheap
// ---------------------------------------------------------------------------
namespace {
thread_local bool t_recompute_cheap = false;
}

RecomputeCheapGuard::RecomputeCheapGuard() : previous_(t_recompute_cheap) {
  t_recompute_cheap = true;
}
RecomputeCheapGuard::~RecomputeCheapGuard() { t_recompute_cheap = previous_; }
bool recompute_cheap() { return t_recompute_cheap; }

namespace detail {
int64_t whole_batch_bytes() { return g_whole_batch_bytes.load(std::memory_order_relaxed); }
WholeBatchBytesGuard::WholeBatchBytesGuard(int64_t bytes)
    : previous_(g_whole_batch_bytes.exchange(bytes)) {}
WholeBatchBytesGuard::~WholeBatchBytesGuard() { g_whole_batch_bytes.store(previous_); }
}  // namespace detail

namespace {

// [Cout, Cin] x [B, Cin, N] (+ b [Cout]) (+ r [B, Cout, N]) -> [B, Cout, N]
// (w and b are cast to x's type; see like())
torch::Tensor lin(const torch::Tensor& w, const torch::Tensor& x, const torch::Tensor& b,
                  const torch::Tensor& r = {}) {
  const auto wb = like(w, x).unsqueeze(0).expand({x.size(0), -1, -1});
  if (r.defined()) {
    auto y = torch::baddbmm(r, wb, x);
    return b.defined() ? y.add_(like(b, x).view({1, -1, 1})) : y;
  }
  return b.defined() ? torch::baddbmm(like(b, x).view({1, -1, 1}), wb, x) : torch::bmm(wb, x);
}

// W^T g into out: [B, Cin, N]
void lin_t_into(torch::Tensor out, const torch::Tensor& w, const torch::Tensor& g) {
  at::bmm_out(out, like(w, g).t().unsqueeze(0).expand({g.size(0), -1, -1}), g);
}

// per_entry for a two-layer channel MLP on x [B, Cin, N]: its widest layer.
bool mlp2_per_entry(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2) {
  return per_entry(x, std::max({x.size(1), w1.size(0), w2.size(0)}));
}

// Runs f(first, count) over the batch: one slice, or one entry per slice
// (`entries`: per_entry).
template <typename F>
void over_batch(int64_t batch, bool entries, F&& f) {
  if (!entries) {
    f(int64_t{0}, batch);
    return;
  }
  for (int64_t i = 0; i < batch; ++i) f(i, int64_t{1});
}

// A slice of [B, C, N] tensors: batch entries [b, b + nb), grid points [s, s + ns).
struct GridSlice {
  int64_t b, nb, s, ns;
  torch::Tensor of(const torch::Tensor& t) const { return t.narrow(0, b, nb).narrow(2, s, ns); }
};

// Grid points per spatial chunk on long grids (one 1024^2 entry is one chunk).
constexpr int64_t kGridChunk = int64_t{1} << 20;

// Runs f over slices: the whole batch at once, or (`entries`: per_entry) one
// entry at a time, in spatial chunks of at most kGridChunk points. The MLPs
// are pointwise in space, so a hidden layer made inside f (forward, or
// recomputed in backward) lives for one chunk: its transient is a chunk's,
// whatever the batch and grid, at no extra compute.
template <typename F>
void over_grid(int64_t batch, int64_t n, bool entries, F&& f) {
  if (!entries) {
    f(GridSlice{0, batch, 0, n});
    return;
  }
  const int64_t chunks = (n + kGridChunk - 1) / kGridChunk;
  const int64_t len = (n + chunks - 1) / chunks;
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t s = 0; s < n; s += len) f(GridSlice{i, 1, s, std::min(len, n - s)});
  }
}

// out = W x + b over the channel dim, written into out (any strides): [B, Cout, N]
void lin_into(torch::Tensor out, const torch::Tensor& w, const torch::Tensor& x,
              const torch::Tensor& b) {
  const auto wb = like(w, x).unsqueeze(0).expand({x.size(0), -1, -1});
  if (b.defined()) {
    at::baddbmm_out(out, like(b, x).view({1, -1, 1}), wb, x);
  } else {
    at::bmm_out(out, wb, x);
  }
}

torch::Tensor zeros_or_none(const torch::Tensor& like) {
  return like.defined() ? torch::zeros_like(like) : torch::Tensor();
}

// The weight gradients of the two-layer MLP y = W2 GELU(W1 a + b1) + b2,
// added into g, for one slice of the batch, and the gradient at its hidden
// pre-activation, dh = GELU'(h) * W2^T dy, with h = W1 a + b1 recomputed (the
// fused functions below never store it).
// a: [n, Cin, N], dy: [n, Cout, N] -> dh: [n, Cmid, N]
struct MLP2Grads {
  torch::Tensor gw1, gb1, gw2, gb2;
  MLP2Grads(const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
            const torch::Tensor& b2)
      : gw1(torch::zeros_like(w1)),
        gb1(zeros_or_none(b1)),
        gw2(torch::zeros_like(w2)),
        gb2(zeros_or_none(b2)) {}
};
torch::Tensor mlp2_hidden_grad(const torch::Tensor& a, const torch::Tensor& dy,
                               const torch::Tensor& w1, const torch::Tensor& b1,
                               const torch::Tensor& w2, MLP2Grads& g) {
  const auto h = lin(w1, a, b1);
  add_wgrad(g.gw2, dy, torch::gelu(h));
  if (g.gb2.defined()) add_channel_sum(g.gb2, dy);
  auto dh = torch::bmm(like(w2, dy).t().unsqueeze(0).expand({dy.size(0), -1, -1}), dy);
  at::gelu_backward_out(dh, dh, h);
  add_wgrad(g.gw1, dh, a);
  if (g.gb1.defined()) add_channel_sum(g.gb1, dh);
  return dh;
}

// mlp2_hidden_grad with GELU(h) and dh from the fused kernel (x: the input
// before act, a = act(x); the weights as the parameters, fp32).
torch::Tensor mlp2_hidden_grad_fused(const torch::Tensor& x, const torch::Tensor& a,
                                     const torch::Tensor& dy, const torch::Tensor& w1,
                                     const torch::Tensor& b1, const torch::Tensor& w2,
                                     bool gelu_input, MLP2Grads& g) {
  auto [gh, dh] = detail::fused_channel_mlp_hidden_grad(x, dy, w1, b1, w2, gelu_input);
  add_wgrad(g.gw2, dy, gh);
  if (g.gb2.defined()) add_channel_sum(g.gb2, dy);
  add_wgrad(g.gw1, dh, a);
  if (g.gb1.defined()) add_channel_sum(g.gb1, dh);
  return dh;
}

// channel_mlp2's backward on [B, C, N] from x and gy (contiguous): x's
// gradient when need_gx, and the weights' (as the parameters, the flattened
// weights' shapes).
ChannelMLP2Grads mlp2_backward(const torch::Tensor& x, const torch::Tensor& gy,
                               const torch::Tensor& w1, const torch::Tensor& b1,
                               const torch::Tensor& w2, const torch::Tensor& b2, bool gelu_input,
                               bool need_gx) {
  // CUDA (cuda/channel_mlp_backward.cu), hidden layers up to 64 or 128 wide: the
  // whole backward in one pass over x and gy, with no hidden-layer tensor.
  if (detail::fused_channel_mlp_backward_usable(x, gy, w1, b1, w2, b2)) {
    return detail::fused_channel_mlp_backward(x, gy, w1, b1, w2, b2, gelu_input, need_gx);
  }
  MLP2Grads g(w1, b1, w2, b2);  // fp32, as the master weights
  const auto w1c = like(w1, x), b1c = like(b1, x), w2c = like(w2, x);
  torch::Tensor gx;
  if (need_gx) gx = torch::empty_like(x);
  // CUDA (cuda/channel_mlp_backward.cu): GELU(h) and dh in one pass.
  const bool fused =
      gy.scalar_type() == x.scalar_type() && detail::fused_channel_mlp_usable(x, w1, b1, w2, b2);
  const bool entries = mlp2_per_entry(x, w1, w2);
  over_grid(x.size(0), x.size(2), entries, [&](const GridSlice& sl) {
    const auto xs = sl.of(x);
    const auto as = gelu_input ? torch::gelu(xs) : xs;
    const auto dh = fused ? mlp2_hidden_grad_fused(xs, as, sl.of(gy), w1, b1, w2, gelu_input, g)
                          : mlp2_hidden_grad(as, sl.of(gy), w1c, b1c, w2c, g);
    if (gx.defined()) {
      auto gxs = sl.of(gx);
      lin_t_into(gxs, w1c, dh);
      if (gelu_input) at::gelu_backward_out(gxs, gxs, xs);
    }
  });
  return {gx, g.gw1, g.gb1, g.gw2, g.gb2};
}

// channel_mlp2 on [B, C, N]: stores x; backward recomputes h = W1 act(x) + b1.
class ChannelMLP2Fn : public torch::autograd::Function<ChannelMLP2Fn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w1, const torch::Tensor& b1,
                               const torch::Tensor& w2, const torch::Tensor& b2, bool gelu_input) {
    ctx->save_for_backward({x, w1, b1, w2, b2});
    ctx->saved_data["gelu"] = gelu_input;
    // CUDA (cuda/channel_mlp_forward.cu): the hidden layer stays in registers.
    if (detail::fused_channel_mlp_usable(x, w1, b1, w2, b2)) {
      return detail::fused_channel_mlp_forward(x, w1, b1, w2, b2, gelu_input);
    }
    // The hidden layer is made chunk by chunk on long grids (over_grid); the
    // weights are cast to the compute type once, not per chunk.
    const auto w1c = like(w1, x), b1c = like(b1, x), w2c = like(w2, x), b2c = like(b2, x);
    auto y = torch::empty({x.size(0), w2.size(0), x.size(2)}, x.options());
    const bool entries = mlp2_per_entry(x, w1, w2);
    over_grid(x.size(0), x.size(2), entries, [&](const GridSlice& sl) {
      const auto xs = sl.of(x);
      const auto h = lin(w1c, gelu_input ? torch::gelu(xs) : xs, b1c);
      lin_into(sl.of(y), w2c, torch::gelu(h), b2c);
    });
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w1 = saved[1], &b1 = saved[2], &w2 = saved[3], &b2 = saved[4];
    auto g = mlp2_backward(x, grads[0].contiguous(), w1, b1, w2, b2,
                           ctx->saved_data["gelu"].toBool(), ctx->needs_input_grad(0));
    return {g.dx, g.w1, g.b1, g.w2, g.b2, torch::Tensor()};
  }
};

// block_tail on [B, C, N]: stores x (or a, without the input GELU) and y1.
class BlockTailFn : public torch::autograd::Function<BlockTailFn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& a, const torch::Tensor& s,
                               const torch::Tensor& w_skip, const torch::Tensor& w1,
                               const torch::Tensor& b1, const torch::Tensor& w2,
                               const torch::Tensor& b2, const torch::Tensor& gate, bool gelu_input,
                               bool gelu_mid) {
    // CUDA (cuda/block_tail_forward.cu): one kernel reads a and s, writes z and y1.
    if (detail::fused_block_tail_usable(a, s, w_skip, w1, b1, w2, b2, gate)) {
      auto [z, y1] = detail::fused_block_tail_forward(a, s, w_skip, w1, b1, w2, b2, gate, gelu_mid);
      ctx->save_for_backward({gelu_input ? x : a, y1, w_skip, w1, b1, w2, b2, gate});
      ctx->saved_data["gelu"] = gelu_input;
      ctx->saved_data["gelu_mid"] = gelu_mid;
      return z;
    }
    const auto y1 = lin(w_skip, a, torch::Tensor(), s);
    torch::Tensor z;
    // CUDA, a width without a fused block tail (cuda/channel_mlp_forward.cu):
    // the channel MLP in one kernel, its hidden layer in registers.
    if (detail::fused_channel_mlp_usable(y1, w1, b1, w2, b2, /*say_missing=*/false)) {
      z = detail::fused_channel_mlp_forward(y1, w1, b1, w2, b2, gelu_mid);
    } else {
      const auto h = lin(w1, gelu_mid ? torch::gelu(y1) : y1, b1);
      z = lin(w2, torch::gelu(h), b2);
    }
    z.addcmul_(like(gate, a), a);
    ctx->save_for_backward({gelu_input ? x : a, y1, w_skip, w1, b1, w2, b2, gate});
    ctx->saved_data["gelu"] = gelu_input;
    ctx->saved_data["gelu_mid"] = gelu_mid;
    return z;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &in = saved[0], &y1 = saved[1], &w_skip = saved[2], &w1 = saved[3], &b1 = saved[4],
               &w2 = saved[5], &b2 = saved[6], &gate = saved[7];
    const bool gelu_input = ctx->saved_data["gelu"].toBool();
    const bool gelu_mid = ctx->saved_data["gelu_mid"].toBool();
    // CUDA: one kernel recomputes the chain per grid point, writes da, ds and
    // per-CTA weight-gradient partials, and a second sums the partials.
    if (detail::fused_block_tail_usable(in, y1, w_skip, w1, b1, w2, b2, gate)) {
      auto g = detail::fused_block_tail_backward(grads[0], in, y1, w_skip, w1, b1, w2, b2, gate,
                                                 gelu_input, gelu_mid);
      return {torch::Tensor(), g.da,           g.ds, g.w_skip, g.w1, g.b1, g.w2, g.b2, g.gate,
              torch::Tensor(), torch::Tensor()};
    }
    const auto dz = grads[0].contiguous();
    const int64_t batch = dz.size(0);
    auto gw_skip = torch::zeros_like(w_skip);
    MLP2Grads g(w1, b1, w2, b2);  // fp32, as the master weights
    auto g_gate = torch::zeros({gate.size(1)}, gate.options());
    // The weights in the compute type, cast once rather than per batch entry.
    const auto w1c = like(w1, dz), b1c = like(b1, dz), w2c = like(w2, dz);
    const auto w_skipc = like(w_skip, dz), gatec = like(gate, dz);
    auto da = torch::empty_like(dz);
    torch::Tensor ds;  // the spectral output's gradient is dy1
    // CUDA, a width without a fused block tail (cuda/channel_mlp_backward.cu):
    // the channel MLP's backward in one pass over y1 and dz, dy1 and its
    // weight gradients with no hidden-layer tensor.
    const bool fused_mlp =
        detail::fused_channel_mlp_backward_usable(y1, dz, w1, b1, w2, b2, /*say_missing=*/false);
    if (fused_mlp) {
      auto r = detail::fused_channel_mlp_backward(y1, dz, w1, b1, w2, b2, gelu_mid, true);
      ds = r.dx;
      g.gw1 = r.w1, g.gb1 = r.b1, g.gw2 = r.w2, g.gb2 = r.b2;
    } else {
      ds = torch::empty_like(dz);
    }
    const bool entries = per_entry(dz, std::max(dz.size(1), w1.size(0)));
    over_batch(batch, entries, [&](int64_t i, int64_t n) {
      const auto dzs = dz.narrow(0, i, n), y1s = y1.narrow(0, i, n);
      const auto as = gelu_input ? torch::gelu(in.narrow(0, i, n)) : in.narrow(0, i, n);
      auto dy1 = ds.narrow(0, i, n);
      if (!fused_mlp) {
        const auto g1 = gelu_mid ? torch::gelu(y1s) : y1s;
        const auto dh = mlp2_hidden_grad(g1, dzs, w1c, b1c, w2c, g);
        lin_t_into(dy1, w1c, dh);
        if (gelu_mid) at::gelu_backward_out(dy1, dy1, y1s);
      }
      add_wgrad(gw_skip, dy1, as);
      add_channel_sum(g_gate, dzs * as);
      auto das = da.narrow(0, i, n);
      lin_t_into(das, w_skipc, dy1);
      das.addcmul_(gatec, dzs);
    });
    return {torch::Tensor(),
            da,
            ds,
            gw_skip,
            g.gw1,
            g.gb1,
            g.gw2,
            g.gb2,
            g_gate.view(gate.sizes()),
            torch::Tensor(),
            torch::Tensor()};
  }
};

// GELU(x) as two outputs of one storage, for two readers; stores x. Backward:
// GELU'(x) (g1 + g2), one CUDA pass (autograd's add, then GeluBackward).
class GeluForkFn : public torch::autograd::Function<GeluForkFn> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& x) {
    auto a = torch::gelu(x);
    ctx->save_for_backward({x});
    return {a, a.alias()};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const auto &g1 = grads[0], &g2 = grads[1];
    if (!g1.defined() || !g2.defined()) {
      const auto& g = g1.defined() ? g1 : g2;
      return {g.defined() ? at::gelu_backward(g, x) : torch::Tensor()};
    }
    if (detail::fused_gelu_backward_sum_usable(x, g1, g2)) {
      return {detail::fused_gelu_backward_sum(x, g1, g2)};
    }
    return {at::gelu_backward(g1 + g2, x)};
  }
};

torch::Tensor flat_weight(const torch::Tensor& w) { return w.dim() == 3 ? w.squeeze(-1) : w; }
torch::Tensor flat_or_none(const torch::Tensor& b) { return b.defined() ? b.view({-1}) : b; }
// A bias for a custom autograd Function's apply(), which cannot take an
// undefined tensor: the bias flattened, or zeros of `n` like w (no gradient
// flows to them: they require none).
torch::Tensor flat_or_zeros(const torch::Tensor& b, int64_t n, const torch::Tensor& w) {
  return b.defined() ? b.view({-1}) : torch::zeros({n}, w.options().requires_grad(false));
}

}  // namespace

torch::Tensor channel_mlp2(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                           const torch::Tensor& w2, const torch::Tensor& b2, bool gelu_input) {
  TORCH_CHECK(x.dim() >= 3, "channel_mlp2: expected input [B, C, *S], got shape ", x.sizes());
  TORCH_CHECK(w1.size(1) == x.size(1) && w2.size(1) == w1.size(0), "channel_mlp2: weights ",
              w1.sizes(), " and ", w2.sizes(), " do not fit input ", x.sizes());
  auto out_shape = x.sizes().vec();
  out_shape[1] = w2.size(0);
  // x: [B, Cin, *S] -> [B, Cin, N] -> [B, Cout, N] -> [B, Cout, *S]
  return ChannelMLP2Fn::apply(x.flatten(2).contiguous(), flat_weight(w1),
                              flat_or_zeros(b1, w1.size(0), w1), flat_weight(w2),
                              flat_or_zeros(b2, w2.size(0), w2), gelu_input)
      .view(out_shape);
}

ChannelMLP2Grads channel_mlp2_backward(const torch::Tensor& x, const torch::Tensor& dy,
                                       const torch::Tensor& w1, const torch::Tensor& b1,
                                       const torch::Tensor& w2, const torch::Tensor& b2,
                                       bool gelu_input, bool need_dx) {
  TORCH_CHECK(x.dim() >= 3 && w1.size(1) == x.size(1) && w2.size(1) == w1.size(0),
              "channel_mlp2_backward: weights ", w1.sizes(), " and ", w2.sizes(),
              " do not fit input ", x.sizes());
  TORCH_CHECK(dy.dim() == x.dim() && dy.size(0) == x.size(0) && dy.size(1) == w2.size(0) &&
                  dy.sizes().slice(2) == x.sizes().slice(2) && dy.scalar_type() == x.scalar_type(),
              "channel_mlp2_backward: the gradient ", dy.sizes(), " (", dy.scalar_type(),
              ") does not fit the output of input ", x.sizes(), " (", x.scalar_type(), ")");
  torch::NoGradGuard no_grad;
  const auto g =
      mlp2_backward(x.flatten(2).contiguous(), dy.flatten(2).contiguous(), flat_weight(w1),
                    flat_or_none(b1), flat_weight(w2), flat_or_none(b2), gelu_input, need_dx);
  const auto as = [](const torch::Tensor& grad, const torch::Tensor& like) {
    return grad.defined() ? grad.view(like.sizes()) : grad;
  };
  return {as(g.dx, x), as(g.w1, w1), as(g.b1, b1), as(g.w2, w2), as(g.b2, b2)};
}

std::array<torch::Tensor, 2> gelu_fork(const torch::Tensor& x) {
  // x: [*] -> (GELU(x), GELU(x)) [*]
  const auto out = GeluForkFn::apply(x);
  return {out[0], out[1]};
}

torch::Tensor block_tail(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& s,
                         const torch::Tensor& w_skip, const torch::Tensor& w1,
                         const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                         const torch::Tensor& gate, bool gelu_input, bool gelu_mid) {
  TORCH_CHECK(a.sizes() == s.sizes() && x.sizes() == a.sizes(), "block_tail: x ", x.sizes(), ", a ",
              a.sizes(), " and s ", s.sizes(), " must have one shape");
  const auto shape = a.sizes().vec();
  // [B, C, *S] -> [B, C, N]; the gate [1, C, 1...] -> [1, C, 1]
  const auto flat = [](const torch::Tensor& t) { return t.flatten(2).contiguous(); };
  return BlockTailFn::apply(flat(x), gelu_input ? flat(a) : flat(x), flat(s), flat_weight(w_skip),
                            flat_weight(w1), flat_or_zeros(b1, w1.size(0), w1), flat_weight(w2),
                            flat_or_zeros(b2, w2.size(0), w2), gate.reshape({1, -1, 1}), gelu_input,
                            gelu_mid)
      .view(shape);
}

}  // namespace fno
