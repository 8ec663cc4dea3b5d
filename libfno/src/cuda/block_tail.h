// Fused CUDA kernels for the pointwise tail of an FNO block (internal to
// libfno; see fno::block_tail in fno/layers.h for the maths). Torch-free, so
// that nvcc compiles the kernels without the torch headers:
// block_tail_fused.cpp calls them with raw pointers from torch tensors, for
// BlockTailFn in pointwise_autograd.cpp (and bench/fused_block_tail_bench.cpp directly).
//
// Files: block_tail_forward.cu, block_tail_backward.cu and (the tiled step's
// backward) block_tail_backward_recompute.cu hold the kernels and their
// launchers, block_tail_tuning.cu the launch tuning; the building blocks are
// in common.cuh, gelu.cuh, mma.cuh, fragments.cuh, tiles.cuh and partials.cuh.
//
// Layout: every activation is [B, C, N] contiguous (N = the flattened grid);
// channel c of grid point (b, n) is at (b * C + c) * N + n, a 64-bit offset.
// Precision: activations in `dtype`, weights, biases, the gate and every
// weight gradient in fp32, accumulation in fp32. fp32 activations (Fp32Math):
// 3xTF32 tensor-core products (fp32-level error), fp32 FFMA products in the
// forward with a 3xTF32 backward, or TF32 tensor cores where the caller allows
// TF32.
// bf16 and half activations: tensor-core products (mma.sync) with the weights
// rounded to the activations' type (as the LibTorch path casts them) and the
// per-point intermediates rounded to it as stored tensors would be.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fno::cuda {

enum class Dtype { kFloat, kBFloat16, kHalf };

/// How fp32 activations' channel products run: 3xTF32 on tensor cores (each
/// operand split into two TF32 parts, three MMAs, fp32 accumulation: about
/// fp32's error), plain TF32 (10-bit mantissas, where allowed), or kFfma: the
/// forward in fp32 FFMA on the CUDA cores and the backward in 3xTF32.
/// (The tensor cores truncate their fp32 sums. In the forward that shrinks
/// every output by about an ulp, a bias that training accumulates; in the
/// backward it scales the gradients, which AdamW's update, blind to their
/// scale, hardly sees. So kFfma keeps the forward off the tensor cores and
/// its runs track the LibTorch path's; docs/precision.md has the numbers.)
enum class Fp32Math { k3xTf32, kFfma, kTf32 };

/// The one shape the kernels are compiled for: C channels, a channel MLP Cmid
/// wide (the seed model's). The kernels are written for any multiple of 4
/// (within the backward's shared memory), but a wider instantiation spills its
/// per-point registers and takes ptxas minutes; other shapes run the LibTorch
/// path (block_tail_fused.cpp says so once per shape).
constexpr int kCompiledChannels = 32;
constexpr int kCompiledMid = 16;

/// Whether the kernels are compiled for C channels and a hidden width Cmid.
bool block_tail_supported(int64_t channels, int64_t mid);

/// fp32 device pointers: w_skip [C, C], w1 [Cmid, C], b1 [Cmid], w2 [C, Cmid],
/// b2 [C], gate [C], all contiguous.
struct BlockTailWeights {
  const float* w_skip;
  const float* w1;
  const float* b1;
  const float* w2;
  const float* b2;
  const float* gate;
};

/// fp32 device pointers for the weight gradients, same shapes as the weights.
struct BlockTailGrads {
  float* w_skip;
  float* w1;
  float* b1;
  float* w2;
  float* b2;
  float* gate;
};

/// y1 = W_skip a + s;  z = W2 GELU(W1 act(y1) + b1) + b2 + gate * a
/// (act = GELU when gelu_mid). a, s -> z, y1: [B, C, N] in `dtype`.
/// Returns a cudaError_t (0 on success).
int block_tail_forward(Dtype dtype, const void* a, const void* s, void* z, void* y1, int64_t batch,
                       int64_t channels, int64_t mid, int64_t n, const BlockTailWeights& w,
                       bool gelu_mid, void* stream, Fp32Math fp32 = Fp32Math::k3xTf32);

/// Floats of workspace the backward needs on this device for this shape (the
/// per-CTA partial gradients), whatever the dtype and Fp32Math.
int64_t block_tail_backward_workspace(int64_t batch, int64_t channels, int64_t mid, int64_t n);

/// The gradients of block_tail: from dz and the stored input (x when
/// gelu_input, then a = GELU(x); else a) and y1, writes da, ds (= dy1) in
/// `dtype` and the fp32 weight gradients g (overwritten, not accumulated).
/// Per-CTA partial sums go to `workspace`, then one reduction over CTAs in a
/// fixed order: the result is deterministic. Returns a cudaError_t.
int block_tail_backward(Dtype dtype, const void* dz, const void* in, const void* y1, void* da,
                        void* ds, int64_t batch, int64_t channels, int64_t mid, int64_t n,
                        const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                        bool gelu_mid, float* workspace, void* stream,
                        Fp32Math fp32 = Fp32Math::k3xTf32);

// ---- The tiled step (fno/tiled.h) ------------------------------------------
// A tiled step keeps each block's input a (post-activation) and remakes the
// spectral output s of a tile; it never keeps y1 or z. Its two kernels:

/// Forward to the next block's input: out = GELU(z) where gelu_mid (every
/// block but the last), else z; y1 is neither stored nor returned. z is
/// rounded to `dtype` before the GELU, as a stored z would be. a, s -> out:
/// [B, C, N]. Returns a cudaError_t.
int block_tail_forward_next(Dtype dtype, const void* a, const void* s, void* out, int64_t batch,
                            int64_t channels, int64_t mid, int64_t n, const BlockTailWeights& w,
                            bool gelu_mid, void* stream, Fp32Math fp32 = Fp32Math::k3xTf32);

/// Backward from the gradient g of block_tail_forward_next's output, with y1 =
/// W_skip a + s, the hidden layer and z recomputed in the kernel (z rounded to
/// `dtype` as in the forward; dz = GELU'(z) g where gelu_mid, else g, rounded
/// to `dtype`): writes da, ds (= dy1) and the fp32 weight gradients
/// (overwritten), with the workspace and fixed-order reduction of
/// block_tail_backward. g, a, s -> da, ds: [B, C, N]. Returns a cudaError_t.
int block_tail_backward_recompute(Dtype dtype, const void* g, const void* a, const void* s,
                                  void* da, void* ds, int64_t batch, int64_t channels, int64_t mid,
                                  int64_t n, const BlockTailWeights& w, const BlockTailGrads& grads,
                                  bool gelu_mid, float* workspace, void* stream,
                                  Fp32Math fp32 = Fp32Math::k3xTf32);

/// Launch tuning of the tensor-core kernels, for the micro-benchmark's sweeps
/// (the defaults measured fastest on an H100: docs/performance.md). The
/// environment variables FNO_BLOCK_TAIL_FWD_CTAS, FNO_BLOCK_TAIL_BWD_CTAS,
/// FNO_BLOCK_TAIL_L2_PREFETCH and FNO_BLOCK_TAIL_PACKED set them at start
/// (block_tail_tuning.cu). Not thread-safe.
struct BlockTailTuning {
  int forward_ctas_per_sm = 0;   // cap on the forward's CTAs per SM (0: 2 fp32, 3 bf16/half)
  int backward_ctas_per_sm = 0;  // cap on the backward's (0: 2, all that fit)
  int l2_prefetch = 128;         // the cp.async L2 prefetch hint: 0, 64, 128 or 256 bytes
  bool packed = true;            // bf16/half backward: one packed copy of each
                                 // per-point operand (false: the unpacked form)
};
void set_block_tail_tuning(const BlockTailTuning& tuning);
BlockTailTuning block_tail_tuning();

/// cudaGetErrorString.
const char* error_string(int error);

}  // namespace fno::cuda
