// The weight gradient of a pointwise channel map, gw[Cout, Cin] += sum over
// batch entries b and grid points n of gy[b, :, n] h[b, :, n]^T (internal to
// libfno; pointwise_autograd.cpp's add_wgrad calls it through channel_wgrad_fused.cpp for
// the LibTorch channel layers: the block tail and the channel MLPs of widths
// without a fused kernel, and the single pointwise layers). Torch-free, as
// block_tail.h.
//
// A batched GEMM gives each batch entry one [Cout, Cin] output tile over a
// reduction as long as the grid, so a few dozen CTAs run while the GPU idles
// (1.2 ms for one [128, 20] gradient over a [10, ., 64 x 64 x 10] batch on an
// H100). Here every CTA takes its share of (entry, 64-point) tiles of both
// operands through shared memory and keeps its [Cout, Cin] sums in registers;
// a second kernel adds the CTAs' sums in CTA order, so the result does not
// depend on timing (deterministic), and adds them into gw.
//
// Layout: gy [B, Cout, N] and h [B, Cin, N] with unit stride along N and any
// batch and channel strides (slices of wider tensors), in `dtype`; gw fp32,
// contiguous. Accumulation in fp32.
#pragma once

#include "block_tail.h"

#include <cstdint>

namespace fno::cuda {

/// Whether the kernel runs a [Cout, Cin] gradient: Cout + Cin up to
/// kMaxWgradChannels (both operands' tiles fit 48 KiB of shared memory).
bool channel_wgrad_supported(int64_t cout, int64_t cin);
constexpr int64_t kMaxWgradChannels = 192;

/// Floats of workspace channel_wgrad needs (the CTAs' partial sums).
int64_t channel_wgrad_workspace(int64_t batch, int64_t n, int64_t cout, int64_t cin);

/// A [B, C, N] operand (or a slice of a wider one): its data and strides.
struct WgradOperand {
  const void* data;
  int64_t batch_stride;
  int64_t channel_stride;
};

/// gw += sum_{b, n} gy[b, :, n] h[b, :, n]^T. Returns a cudaError_t (0 on success).
int channel_wgrad(Dtype dtype, WgradOperand gy, WgradOperand h, int64_t batch, int64_t cout,
                  int64_t cin, int64_t n, float* workspace, float* gw, void* stream);

}  // namespace fno::cuda
