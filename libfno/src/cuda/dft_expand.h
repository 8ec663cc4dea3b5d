// The expanding GEMM of the last dim's real DFT (spectral.h's RealDft): a
// grid-sized output from a few kept modes per row, y[M, S] = z[M, N2] b[N2, S]
// in fp32, where N2 = 2k (the modes' real and imaginary parts) is small. The
// synthesis in forward and the analysis' adjoint in backward are this product.
// cuBLAS pads the narrow inner dim to its tiles (16 or more FMAs wasted per
// useful one at N2 = 18); here one thread keeps four columns of b in registers
// for the whole grid and writes y once, at the memory's pace. Internal to
// libfno, torch-free, as block_tail.h.
//
// Arithmetic: each output is the fp32 FMA chain over j = 0 .. N2-1 in order.
#pragma once

#include <cstdint>

namespace fno::cuda {

/// Whether a kernel is compiled for N2 inner terms and S (a multiple of 4)
/// output columns: N2 in {16, 18, 24, 32}.
bool dft_expand_supported(int64_t n2, int64_t s);

/// y = z b for contiguous row-major z [m, n2], b [n2, s], y [m, s], all
/// 16-byte aligned (z 8-byte). Returns a cudaError_t (0 on success;
/// cudaErrorInvalidValue for a shape dft_expand_supported refuses).
int dft_expand(const float* z, const float* b, float* y, int64_t m, int64_t n2, int64_t s,
               void* stream);

}  // namespace fno::cuda
