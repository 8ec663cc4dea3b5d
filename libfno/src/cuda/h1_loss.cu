// The relative H1 loss's kernels (h1_loss.h).
//
// Forward: partial_kernel gives each CTA one chunk of one row and writes the
// chunk's two sums (N's and M's terms, every point's function and derivative
// terms together); finish_kernel, one CTA, adds each row's chunks in order,
// writes c_r and reduces the rows' losses in a fixed order (deterministic).
// Every sum is in fp64 (the terms are fp32): a thread's share of a chunk
// grows with the grid (about 2000 points at 16384^2, batch 1), and the
// relative loss's coefficient scales every gradient of the step.
// Backward: one thread per point reads x and y two points either way along
// each spatial dim (L1 and L2 serve the neighbours' reads).
#include "h1_loss.h"

#include "block_tail_tuning.cuh"  // device_sms

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace fno::cuda {
namespace detail::h1 {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The point `d` steps (|d| <= 2) along a periodic axis of n points and stride
// s from point p of a row, whose coordinate on that axis is i (a row's points
// are counted in 32 bits: h1_rel_* refuse rows of 2^31 points or more).
__device__ __forceinline__ int step(int p, int i, int n, int s, int d) {
  int j = i + d;
  // (twice: an axis of one point, two steps)
  if (j >= n) j -= n;
  if (j >= n) j -= n;
  if (j < 0) j += n;
  if (j < 0) j += n;
  return p + (j - i) * s;
}

// Coordinates of point p of a row: i[2] along the last (unit-stride) axis.
__device__ __forceinline__ void coords(int p, const int (&n)[3], int (&i)[3]) {
  i[2] = p % n[2];
  p /= n[2];
  i[1] = p % n[1];
  i[0] = p / n[1];
}

// A row's axes as 32-bit sizes and strides.
struct Axes {
  int n[3], stride[3], npts;
  __device__ explicit Axes(const H1Grid& g) {
    n[0] = static_cast<int>(g.n[0]), n[1] = static_cast<int>(g.n[1]),
    n[2] = static_cast<int>(g.n[2]);
    stride[2] = 1, stride[1] = n[2], stride[0] = n[1] * n[2];
    npts = n[0] * n[1] * n[2];
  }
};

// The sums of v and w over the CTA, in a fixed order; valid in thread 0.
// `red` holds 2 * kWarps values. Every thread of the CTA calls it.
__device__ __forceinline__ void block_sum2(double& v, double& w, double* red) {
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_down_sync(0xffffffffu, v, o);
    w += __shfl_down_sync(0xffffffffu, w, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v, red[kWarps + warp] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = red[0], w = red[kWarps];
    for (int k = 1; k < kWarps; ++k) v += red[k], w += red[kWarps + k];
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    partial_kernel(const float* __restrict__ x, const float* __restrict__ y, H1Grid g,
                   int chunk_len, float* __restrict__ ws) {
  __shared__ double red[2 * kWarps];
  const Axes a(g);
  const int k0 = 3 - g.dims;
  const int begin = static_cast<int>(blockIdx.x) * chunk_len;
  const int end = a.npts - begin > chunk_len ? begin + chunk_len : a.npts;
  for (int64_t r = blockIdx.y; r < g.rows; r += gridDim.y) {
    const float* xr = x + r * a.npts;
    const float* yr = y + r * a.npts;
    double num = 0.0, den = 0.0;
    for (int p = begin + static_cast<int>(threadIdx.x); p < end; p += kThreads) {
      const float yv = yr[p];
      const float e = xr[p] - yv;
      float pn = e * e, pd = yv * yv;  // the point's terms, in fp32
      int i[3];
      coords(p, a.n, i);
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        if (k < k0) continue;  // (unrolled: the arrays stay in registers)
        const int pp = step(p, i[k], a.n[k], a.stride[k], 1);
        const int pm = step(p, i[k], a.n[k], a.stride[k], -1);
        const float dx = (xr[pp] - xr[pm]) * g.inv2h[k];
        const float dy = (yr[pp] - yr[pm]) * g.inv2h[k];
        const float d = dx - dy;
        pn += d * d;
        pd += dy * dy;
      }
      num += pn;
      den += pd;
    }
    block_sum2(num, den, red);
    if (threadIdx.x == 0) {
      float* out = ws + (r * gridDim.x + blockIdx.x) * 2;
      out[0] = static_cast<float>(num);
      out[1] = static_cast<float>(den);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    finish_kernel(const float* __restrict__ ws, int64_t rows, int chunks, float eps, bool mean,
                  float* __restrict__ coef, float* __restrict__ loss) {
  __shared__ double red[2 * kWarps];
  double local = 0.0, unused = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    double n = 0.0, m = 0.0;
    for (int c = 0; c < chunks; ++c) {
      n += ws[(r * chunks + c) * 2];
      m += ws[(r * chunks + c) * 2 + 1];
    }
    const double sn = sqrt(n), sm = sqrt(m) + eps;
    local += sn / sm;
    coef[r] = n > 0.0 ? static_cast<float>(1.0 / (sn * sm)) : 0.f;
  }
  block_sum2(local, unused, red);
  if (threadIdx.x == 0) {
    *loss = static_cast<float>(mean ? local / static_cast<double>(rows) : local);
  }
}

// A CTA per (chunk, row), as partial_kernel's.
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const float* __restrict__ x, const float* __restrict__ y, H1Grid g,
                    int chunk_len, const float* __restrict__ coef, const float* __restrict__ grad,
                    bool mean, float* __restrict__ dx) {
  const Axes a(g);
  const int k0 = 3 - g.dims;
  const int begin = static_cast<int>(blockIdx.x) * chunk_len;
  const int end = a.npts - begin > chunk_len ? begin + chunk_len : a.npts;
  const float gs = mean ? grad[0] * (1.f / static_cast<float>(g.rows)) : grad[0];
  for (int64_t r = blockIdx.y; r < g.rows; r += gridDim.y) {
    const float* xr = x + r * a.npts;
    const float* yr = y + r * a.npts;
    float* dr = dx + r * a.npts;
    const float c = gs * coef[r];
    for (int p = begin + static_cast<int>(threadIdx.x); p < end; p += kThreads) {
      const float xv = xr[p], yv = yr[p];
      float v = xv - yv;
      int i[3];
      coords(p, a.n, i);
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        if (k < k0) continue;
        const float inv = g.inv2h[k];
        const int p2 = step(p, i[k], a.n[k], a.stride[k], 2);
        const int m2 = step(p, i[k], a.n[k], a.stride[k], -2);
        // d_k at the points either side: (D_k x - D_k y)(p + 1) and (p - 1)
        const float d_next = (xr[p2] - xv) * inv - (yr[p2] - yv) * inv;
        const float d_prev = (xv - xr[m2]) * inv - (yv - yr[m2]) * inv;
        v += (d_prev - d_next) * inv;
      }
      dr[p] = c * v;
    }
  }
}

// CTAs per row: about `per_sm` CTAs per multiprocessor in all, each chunk at
// least four points per thread.
int chunks_for(const H1Grid& g, int per_sm) {
  const int64_t npts = g.n[0] * g.n[1] * g.n[2];
  const int64_t rows = std::max<int64_t>(g.rows, 1);
  const int64_t want = (int64_t{per_sm} * device_sms() + rows - 1) / rows;
  const int64_t most = std::max<int64_t>(1, (npts + 4 * kThreads - 1) / (4 * kThreads));
  return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}

constexpr int kForwardPerSm = 4, kBackwardPerSm = 8;

bool fits(const H1Grid& g) {
  const int64_t npts = g.n[0] * g.n[1] * g.n[2];
  return g.rows >= 1 && npts >= 1 && npts < (int64_t{1} << 31) && g.dims >= 1 && g.dims <= 3;
}

dim3 grid_for(const H1Grid& g, int chunks) {
  return dim3(static_cast<unsigned>(chunks),
              static_cast<unsigned>(std::min<int64_t>(g.rows, 65535)));
}

int chunk_len(const H1Grid& g, int chunks) {
  const int64_t npts = g.n[0] * g.n[1] * g.n[2];
  return static_cast<int>((npts + chunks - 1) / chunks);
}

}  // namespace
}  // namespace detail::h1

int64_t h1_rel_workspace(const H1Grid& g) {
  using namespace detail::h1;
  return fits(g) ? g.rows * chunks_for(g, kForwardPerSm) * 2 : 1;
}

int h1_rel_forward(const float* x, const float* y, const H1Grid& g, float eps, bool mean,
                   float* workspace, float* coef, float* loss, void* stream) {
  using namespace detail::h1;
  if (!fits(g)) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  const int chunks = chunks_for(g, kForwardPerSm);
  partial_kernel<<<grid_for(g, chunks), kThreads, 0, s>>>(x, y, g, chunk_len(g, chunks), workspace);
  if (const auto err = cudaGetLastError()) return static_cast<int>(err);
  finish_kernel<<<1, kThreads, 0, s>>>(workspace, g.rows, chunks, eps, mean, coef, loss);
  return static_cast<int>(cudaGetLastError());
}

int h1_rel_backward(const float* x, const float* y, const H1Grid& g, const float* coef,
                    const float* grad, bool mean, float* dx, void* stream) {
  using namespace detail::h1;
  if (!fits(g)) return cudaErrorInvalidValue;
  const int chunks = chunks_for(g, kBackwardPerSm);
  backward_kernel<<<grid_for(g, chunks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, y, g, chunk_len(g, chunks), coef, grad, mean, dx);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace fno::cuda
