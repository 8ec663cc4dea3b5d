// The last step of AdamW's device step (fno/optim.h, AdamW::step_on_device)
// for fp32 parameters, with the step size and the weight decay read from the
// device, so that a CUDA graph holds it (internal to libfno; optim.cpp calls
// it). Torch-free, as block_tail.h.
//
// The host step computes p + s * (m / d) and then p + a * p in torch's
// multi-tensor kernels, each a fused multiply-add; AdamW::step_on_device
// computes q = m / d with the same kernel, and this kernel the rest the same
// way, so that the two steps give the same numbers:
//   p = fma(s, q, p);  p = fma(a, p, p)   (the second only with a decay)
#pragma once

#include <cstdint>

namespace fno::cuda {

/// Tensors of one launch at most (the kernel's argument block).
constexpr int kAdamWApplyTensors = 48;

/// fp32 device pointers of up to kAdamWApplyTensors parameters and their
/// updates q, of n[i] elements each.
struct AdamWApplyArgs {
  float* p[kAdamWApplyTensors];
  const float* q[kAdamWApplyTensors];
  int64_t n[kAdamWApplyTensors];
  int count;
};

/// p = fma(*step, q, p), then p = fma(*decay, p, p) when decay is not null;
/// `step` and `decay` are fp32 device scalars. Returns a cudaError_t (0 on success).
int adamw_apply(const AdamWApplyArgs& args, const float* step, const float* decay, void* stream);

}  // namespace fno::cuda
