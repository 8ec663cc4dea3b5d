// Fused CUDA kernels for the relative H1 loss on periodic grids (internal to
// libfno; fno::H1Loss::rel in losses.cpp calls them through h1_loss_fused.cpp).
// Torch-free, as block_tail.h.
//
// The LibTorch path builds the loss from about 35 small ops (two rolls, a
// subtraction and a scaling per derivative of each of x and y, squares, sums,
// square roots) and autograd runs about as many backward; on small grids under
// CUDA graphs their launches, not their bytes, take the time. Here the forward
// is two kernels (per-row partial sums, then one block that finishes the rows
// and the reduction in a fixed order) and the backward one stencil kernel.
//
// For each row r (the leading dims flattened) of x and y on a periodic grid
// with spacing h_k, D_k u = (u[i + 1] - u[i - 1]) / (2 h_k) along spatial dim k,
// and with e = x - y:
//   N_r = sum e^2 + sum_k sum (D_k x - D_k y)^2,  M_r = sum y^2 + sum_k sum (D_k y)^2,
//   loss = sum_r sqrt(N_r) / (sqrt(M_r) + eps)   (or the mean over rows),
//   dloss/dx = g c_r (e + sum_k (d_k[i - 1] - d_k[i + 1]) / (2 h_k)),
// where d_k = D_k x - D_k y and c_r = 1 / (sqrt(N_r) (sqrt(M_r) + eps)), 0 where
// N_r = 0 (autograd's chain gives 0 * inf there). The arithmetic follows the
// LibTorch path on CUDA: (u[i + 1] - u[i - 1]) times the float reciprocal of
// 2 h (as a tensor divided by a scalar computes it), fp32 throughout; the sums
// run in another order.
//
// Layout: x, y, dx contiguous fp32 [rows, n0, n1, n2] (unused leading spatial
// dims of size 1).
#pragma once

#include <cstdint>

namespace fno::cuda {

/// The grid: `rows` functions on a periodic grid of n[0] x n[1] x n[2] points
/// (the last `dims` sizes are the spatial dims; the others 1), and 1 / (2 h)
/// per entry of n, as float.
struct H1Grid {
  int64_t rows;
  int64_t n[3];
  int dims;
  float inv2h[3];
};

/// Floats of workspace h1_rel_forward needs on this device (per-row partial sums).
int64_t h1_rel_workspace(const H1Grid& g);

/// The loss (one float, written to `loss`) and the rows' gradient factors c_r
/// (`coef`, rows floats) for h1_rel_backward. Returns a cudaError_t (0 on success).
int h1_rel_forward(const float* x, const float* y, const H1Grid& g, float eps, bool mean,
                   float* workspace, float* coef, float* loss, void* stream);

/// dx = dloss/dx times grad[0] (a device float: the loss's upstream gradient).
/// Returns a cudaError_t.
int h1_rel_backward(const float* x, const float* y, const H1Grid& g, const float* coef,
                    const float* grad, bool mean, float* dx, void* stream);

}  // namespace fno::cuda
