// The backward of GELU applied once and read twice (fno::gelu_fork in
// pointwise_autograd.cpp): dx = GELU'(x) * (g1 + g2) in one pass over memory, where
// autograd would add the two gradients (three passes) and then run
// GeluBackward (three more). Internal to libfno, torch-free, as block_tail.h.
//
// The arithmetic is LibTorch's: g1 + g2 in fp32, rounded to the activations'
// type as autograd's sum is stored, then torch's exact (erf) GELU derivative
// in fp32 (ActivationGeluKernel.cu's formula), rounded to the type.
#pragma once

#include "block_tail.h"  // Dtype

#include <cstdint>

namespace fno::cuda {

/// dx = GELU'(x) * (g1 + g2) over n elements of contiguous tensors of one
/// dtype (dx may alias g1 or g2). Returns a cudaError_t (0 on success).
int gelu_backward_sum(Dtype dtype, const void* x, const void* g1, const void* g2, void* dx,
                      int64_t n, void* stream);

}  // namespace fno::cuda
