// Fused CUDA kernels (libfno/src/cuda/): which are built, and a switch for them.
//
// The fused path runs where the tensors are CUDA tensors of float, bfloat16 or
// half and the shape is one the kernels are compiled for; everything else runs
// the LibTorch code. The environment variable FNO_FUSED=0 turns the fused
// kernels off at start; set_fused_kernels_enabled() switches them at run time
// (tests and benchmarks compare both paths).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace fno {

/// Whether this build holds the CUDA kernels (LibTorch with CUDA and nvcc found).
bool fused_kernels_compiled();

/// Whether fused kernels are used where they apply: compiled in, FNO_FUSED
/// not "0" at the first call, and not switched off since.
bool fused_kernels_enabled();

/// Switches the fused kernels on (where compiled in) or off, for every thread.
void set_fused_kernels_enabled(bool enabled);

/// Whether block_tail on activations like `x` ([B, channels, *S]) with an MLP
/// hidden width `mid` runs the fused kernels. Where only the shape has no
/// compiled kernel, it says so on stderr, once per (channels, mid).
bool fused_block_tail_applies(const torch::Tensor& x, int64_t channels, int64_t mid);

/// How the fused block tail computes with fp32 activations where TF32 is not
/// allowed (fno::MatmulPrecisionGuard allows it for --precision tf32, which
/// runs plain TF32):
/// - kFFMA, the default: the forward's per-point products in fp32 FFMA, as the
///   LibTorch path; the backward in 3xTF32 on tensor cores;
/// - k3xTF32, opt-in: 3xTF32 in both (each operand split into two TF32 parts,
///   three MMAs, sums in fp32).
/// Per step both have fp32's error. Over training they differ: the tensor
/// cores truncate their sums, which in the forward shrinks every output by
/// about an ulp and moves a training run's metrics measurably; in the backward
/// the same truncation scales the gradients, which AdamW's update, blind to
/// their scale, hardly sees (docs/precision.md has the measurements). The
/// environment variable FNO_BLOCK_TAIL_FP32=3xtf32 picks 3xTF32 at start.
enum class Fp32BlockTail { kFFMA, k3xTF32 };
Fp32BlockTail fp32_block_tail();
/// Sets it for every thread.
void set_fp32_block_tail(Fp32BlockTail mode);

/// Whether the bf16/half block-tail backward keeps one packed copy of each
/// per-point operand (the default) or the unpacked form: the same results bit
/// for bit (the tests compare them). A no-op without the CUDA kernels.
bool block_tail_packed();
void set_block_tail_packed(bool packed);

/// Turns the fused kernels off (or on) while alive, then restores the setting.
class FusedKernelsGuard {
 public:
  explicit FusedKernelsGuard(bool enabled) : previous_(fused_kernels_enabled()) {
    set_fused_kernels_enabled(enabled);
  }
  ~FusedKernelsGuard() { set_fused_kernels_enabled(previous_); }
  FusedKernelsGuard(const FusedKernelsGuard&) = delete;
  FusedKernelsGuard& operator=(const FusedKernelsGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace fno
