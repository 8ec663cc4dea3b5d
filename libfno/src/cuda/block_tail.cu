// Fused forward and backward of an FNO block's pointwise tail (block_tail.h).
//
// One thread owns one grid point: its C-channel vectors live in registers and
// channel c is read at (b * C + c) * N + n, so a warp's loads of one channel
// are coalesced. Weights sit in shared memory as fp32 and are read with
// uniform (broadcast) 16-byte loads. Backward recomputes a, GELU(y1) and the
// hidden layer per point, writes da and ds, and stages the per-point vectors
// of a tile of kTile points in shared memory, from which the CTA accumulates
// its weight gradients (each thread owning a fixed set of entries, in
// registers). Each CTA writes its partial sums once; a second kernel adds
// them over CTAs in a fixed order.
#include "block_tail.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

namespace fno::cuda {
namespace {

// ---------------------------------------------------------------------------
// Element access and GELU (exact erf form, as torch::gelu's default)
// ---------------------------------------------------------------------------
__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(__ldg(p)); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(__ldg(p)); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half(v); }
// v rounded to T and back: what a stored-then-reloaded value is.
template <typename T>
__device__ __forceinline__ float round_to(float v);
template <>
__device__ __forceinline__ float round_to<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float round_to<__nv_bfloat16>(float v) {
  return __bfloat162float(__float2bfloat16(v));
}
template <>
__device__ __forceinline__ float round_to<__half>(float v) {
  return __half2float(__float2half(v));
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * kInvSqrt2)); }
// GELU(x) and GELU'(x) = Phi(x) + x phi(x), as at::gelu_backward.
__device__ __forceinline__ void gelu_and_grad(float x, float& g, float& d) {
  const float cdf = 0.5f * (1.f + erff(x * kInvSqrt2));
  g = x * cdf;
  d = cdf + x * expf(-0.5f * x * x) * kInvSqrt2Pi;
}

// dot(row[0..K), v) with 16-byte loads of a shared-memory row (uniform address).
template <int K>
__device__ __forceinline__ float dot_row(const float* row, const float (&v)[K], float acc) {
  static_assert(K % 4 == 0, "rows are read as float4");
  const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int q = 0; q < K / 4; ++q) {
    const float4 w = r4[q];
    acc = fmaf(w.x, v[4 * q], acc);
    acc = fmaf(w.y, v[4 * q + 1], acc);
    acc = fmaf(w.z, v[4 * q + 2], acc);
    acc = fmaf(w.w, v[4 * q + 3], acc);
  }
  return acc;
}

// out[0..K) += s * row[0..K)
template <int K>
__device__ __forceinline__ void axpy_row(const float* row, float s, float (&out)[K]) {
  const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int q = 0; q < K / 4; ++q) {
    const float4 w = r4[q];
    out[4 * q] = fmaf(w.x, s, out[4 * q]);
    out[4 * q + 1] = fmaf(w.y, s, out[4 * q + 1]);
    out[4 * q + 2] = fmaf(w.z, s, out[4 * q + 2]);
    out[4 * q + 3] = fmaf(w.w, s, out[4 * q + 3]);
  }
}

// Stores v[0..K) as row `row` of a [*, K + 4] fp32 shared-memory tile (the
// padding keeps a warp's 16-byte stores of consecutive rows conflict-free).
template <int K>
__device__ __forceinline__ void tile_store(float* tile, int row, const float (&v)[K]) {
  float4* r4 = reinterpret_cast<float4*>(tile + row * (K + 4));
#pragma unroll
  for (int q = 0; q < K / 4; ++q)
    r4[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

template <int C, int CM>
struct Shape {
  static_assert(C % 4 == 0 && CM % 4 == 0, "channel counts must be multiples of 4");
  // The fp32 weights in shared memory.
  static constexpr int kWSkip = 0;
  static constexpr int kW1 = kWSkip + C * C;
  static constexpr int kB1 = kW1 + CM * C;
  static constexpr int kW2 = kB1 + CM;
  static constexpr int kB2 = kW2 + C * CM;
  static constexpr int kGate = kB2 + C;
  static constexpr int kWeights = ((kGate + C + 3) / 4) * 4;
  // The gradient entries, in the workspace's order: w_skip, w1, b1, w2, b2, gate.
  static constexpr int kEntries = C * C + CM * C + CM + C * CM + C + C;
};

// Loads the weights into shared memory (called by every thread, then a barrier).
template <int C, int CM>
__device__ void load_weights(float* sw, const BlockTailWeights& w) {
  using S = Shape<C, CM>;
  for (int i = threadIdx.x; i < C * C; i += blockDim.x) sw[S::kWSkip + i] = w.w_skip[i];
  for (int i = threadIdx.x; i < CM * C; i += blockDim.x) {
    sw[S::kW1 + i] = w.w1[i];
    sw[S::kW2 + i] = w.w2[i];
  }
  for (int i = threadIdx.x; i < CM; i += blockDim.x) sw[S::kB1 + i] = w.b1[i];
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    sw[S::kB2 + i] = w.b2[i];
    sw[S::kGate + i] = w.gate[i];
  }
}

// ---------------------------------------------------------------------------
// Forward: reads a, s; writes y1 and z.
// ---------------------------------------------------------------------------
constexpr int kFwdThreads = 256;

template <typename T, int C, int CM, bool kGeluMid>
__global__ void __launch_bounds__(kFwdThreads)
    forward_kernel(const T* __restrict__ a, const T* __restrict__ s, T* __restrict__ z,
                   T* __restrict__ y1, int64_t n, int64_t points, BlockTailWeights w) {
  using S = Shape<C, CM>;
  __shared__ __align__(16) float sw[S::kWeights];
  load_weights<C, CM>(sw, w);
  __syncthreads();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < points; p += stride) {
    // Keeps the compiler from hoisting the loop-invariant weight loads out of
    // the loop into (spilled) registers.
    asm volatile("" ::: "memory");
    const int64_t b = p / n;
    const int64_t base = b * C * n + (p - b * n);
    float av[C], y[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      av[c] = load(a + base + c * n);
      y[c] = load(s + base + c * n);
    }
    // y1 = W_skip a + s, stored; the rest reads y1 as stored (rounded to T),
    // as backward, which reloads it, does.
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const float v = dot_row<C>(sw + S::kWSkip + i * C, av, y[i]);
      store(y1 + base + i * n, v);
      y[i] = round_to<T>(v);
      if (kGeluMid) y[i] = gelu(y[i]);
    }
    float gh[CM];
#pragma unroll
    for (int k = 0; k < CM; ++k) gh[k] = gelu(dot_row<C>(sw + S::kW1 + k * C, y, sw[S::kB1 + k]));
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const float v = dot_row<CM>(sw + S::kW2 + i * CM, gh, sw[S::kB2 + i]);
      store(z + base + i * n, fmaf(sw[S::kGate + i], av[i], v));
    }
  }
}

// ---------------------------------------------------------------------------
// Backward: reads dz, in (x or a), y1; writes da, ds and per-CTA partial
// weight gradients.
// ---------------------------------------------------------------------------
constexpr int kBwdThreads = 128;  // = grid points per tile

template <int C, int CM>
struct BwdLayout {
  using S = Shape<C, CM>;
  static constexpr int kP = kBwdThreads;
  // Per-point tiles, rows padded by 4 floats.
  static constexpr int kA = S::kWeights;           // a       [kP][C + 4]
  static constexpr int kG1 = kA + kP * (C + 4);    // act(y1) [kP][C + 4]
  static constexpr int kDY = kG1 + kP * (C + 4);   // dy1     [kP][C + 4]
  static constexpr int kDZ = kDY + kP * (C + 4);   // dz      [kP][C + 4]
  static constexpr int kGH = kDZ + kP * (C + 4);   // GELU(h) [kP][CM + 4]
  static constexpr int kDH = kGH + kP * (CM + 4);  // dh      [kP][CM + 4]
  static constexpr int kFloats = kDH + kP * (CM + 4);
  static constexpr size_t kBytes = sizeof(float) * kFloats;

  // Ownership of the gradient entries: thread t owns a block of kR rows x 4
  // columns of each weight gradient, and entries t, t + kP, ... of the vector
  // gradients [b2 | gate | b1].
  template <int R, int K>
  struct Own {
    static constexpr int kColGroups = K / 4;
    static constexpr int kRowSets = kP / kColGroups;
    static_assert(kP % kColGroups == 0 && R % kRowSets == 0, "unsupported channel counts");
    static constexpr int kR = R / kRowSets;
  };
  using OwnSkip = Own<C, C>;  // dW_skip[i][j] = sum dy1_i a_j
  using Own1 = Own<CM, C>;    // dW1[k][i]     = sum dh_k act(y1)_i
  using Own2 = Own<C, CM>;    // dW2[i][k]     = sum dz_i GELU(h)_k
  static constexpr int kVec = 2 * C + CM;
  static constexpr int kVecPerThread = (kVec + kP - 1) / kP;
};

template <typename T, int C, int CM, bool kGeluIn, bool kGeluMid>
__global__ void __launch_bounds__(kBwdThreads)
    backward_kernel(const T* __restrict__ dz, const T* __restrict__ in, const T* __restrict__ y1,
                    T* __restrict__ da, T* __restrict__ ds, int64_t n, int64_t points,
                    BlockTailWeights w, float* __restrict__ partial) {
  using S = Shape<C, CM>;
  using L = BwdLayout<C, CM>;
  using OS = typename L::OwnSkip;
  using O1 = typename L::Own1;
  using O2 = typename L::Own2;
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  load_weights<C, CM>(sm, w);

  const int t = threadIdx.x;
  const int s_r0 = (t / OS::kColGroups) * OS::kR, s_c0 = (t % OS::kColGroups) * 4;
  const int w1_r0 = (t / O1::kColGroups) * O1::kR, w1_c0 = (t % O1::kColGroups) * 4;
  const int w2_r0 = (t / O2::kColGroups) * O2::kR, w2_c0 = (t % O2::kColGroups) * 4;
  float acc_s[OS::kR][4] = {}, acc_1[O1::kR][4] = {}, acc_2[O2::kR][4] = {};
  float acc_v[L::kVecPerThread] = {};
  __syncthreads();

  const int64_t stride = int64_t{gridDim.x} * L::kP;
  for (int64_t p0 = int64_t{blockIdx.x} * L::kP; p0 < points; p0 += stride) {
    const int64_t p = p0 + t;
    const bool valid = p < points;
    const int64_t b = p / n;
    const int64_t base = b * C * n + (p - b * n);
    // A point past the end loads zeros: with dz = 0 it adds nothing to any gradient.
    float av[C], g1[C], d1[C], dzv[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      av[c] = valid ? load(in + base + c * n) : 0.f;
      g1[c] = valid ? load(y1 + base + c * n) : 0.f;
      dzv[c] = valid ? load(dz + base + c * n) : 0.f;
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (kGeluIn) av[c] = round_to<T>(gelu(av[c]));  // a as the forward's caller made it
      if (kGeluMid) {
        gelu_and_grad(g1[c], g1[c], d1[c]);
      } else {
        d1[c] = 1.f;
      }
    }
    tile_store<C>(sm + L::kA, t, av);
    tile_store<C>(sm + L::kG1, t, g1);
    tile_store<C>(sm + L::kDZ, t, dzv);
    // Hidden layer h = W1 g1 + b1, recomputed.
    float gh[CM], dh[CM];
#pragma unroll
    for (int k = 0; k < CM; ++k) {
      const float h = dot_row<C>(sm + S::kW1 + k * C, g1, sm[S::kB1 + k]);
      gelu_and_grad(h, gh[k], dh[k]);  // dh holds GELU'(h) for now
    }
    tile_store<CM>(sm + L::kGH, t, gh);
    // dh = GELU'(h) * W2^T dz
    float dgh[CM] = {};
#pragma unroll
    for (int i = 0; i < C; ++i) axpy_row<CM>(sm + S::kW2 + i * CM, dzv[i], dgh);
#pragma unroll
    for (int k = 0; k < CM; ++k) dh[k] *= dgh[k];
    tile_store<CM>(sm + L::kDH, t, dh);
    // dy1 = act'(y1) * W1^T dh: the spectral output's gradient ds too.
    float dy[C] = {};
#pragma unroll
    for (int k = 0; k < CM; ++k) axpy_row<C>(sm + S::kW1 + k * C, dh[k], dy);
#pragma unroll
    for (int i = 0; i < C; ++i) {
      dy[i] *= d1[i];
      if (valid) store(ds + base + i * n, dy[i]);
    }
    tile_store<C>(sm + L::kDY, t, dy);
    // da = W_skip^T dy1 + gate * dz
    float dav[C];
#pragma unroll
    for (int j = 0; j < C; ++j) dav[j] = sm[S::kGate + j] * dzv[j];
#pragma unroll
    for (int i = 0; i < C; ++i) axpy_row<C>(sm + S::kWSkip + i * C, dy[i], dav);
    if (valid) {
#pragma unroll
      for (int j = 0; j < C; ++j) store(da + base + j * n, dav[j]);
    }
    __syncthreads();

    // This tile's contributions to the entries this thread owns.
#pragma unroll 2
    for (int q = 0; q < L::kP; ++q) {
      const float4 a4 = *reinterpret_cast<const float4*>(sm + L::kA + q * (C + 4) + s_c0);
#pragma unroll
      for (int r = 0; r < OS::kR; ++r) {
        const float v = sm[L::kDY + q * (C + 4) + s_r0 + r];
        acc_s[r][0] = fmaf(v, a4.x, acc_s[r][0]);
        acc_s[r][1] = fmaf(v, a4.y, acc_s[r][1]);
        acc_s[r][2] = fmaf(v, a4.z, acc_s[r][2]);
        acc_s[r][3] = fmaf(v, a4.w, acc_s[r][3]);
      }
      const float4 g4 = *reinterpret_cast<const float4*>(sm + L::kG1 + q * (C + 4) + w1_c0);
#pragma unroll
      for (int r = 0; r < O1::kR; ++r) {
        const float v = sm[L::kDH + q * (CM + 4) + w1_r0 + r];
        acc_1[r][0] = fmaf(v, g4.x, acc_1[r][0]);
        acc_1[r][1] = fmaf(v, g4.y, acc_1[r][1]);
        acc_1[r][2] = fmaf(v, g4.z, acc_1[r][2]);
        acc_1[r][3] = fmaf(v, g4.w, acc_1[r][3]);
      }
      const float4 h4 = *reinterpret_cast<const float4*>(sm + L::kGH + q * (CM + 4) + w2_c0);
#pragma unroll
      for (int r = 0; r < O2::kR; ++r) {
        const float v = sm[L::kDZ + q * (C + 4) + w2_r0 + r];
        acc_2[r][0] = fmaf(v, h4.x, acc_2[r][0]);
        acc_2[r][1] = fmaf(v, h4.y, acc_2[r][1]);
        acc_2[r][2] = fmaf(v, h4.z, acc_2[r][2]);
        acc_2[r][3] = fmaf(v, h4.w, acc_2[r][3]);
      }
#pragma unroll
      for (int j = 0; j < L::kVecPerThread; ++j) {
        const int e = t + j * L::kP;
        if (e < C) {  // b2
          acc_v[j] += sm[L::kDZ + q * (C + 4) + e];
        } else if (e < 2 * C) {  // gate
          acc_v[j] =
              fmaf(sm[L::kDZ + q * (C + 4) + e - C], sm[L::kA + q * (C + 4) + e - C], acc_v[j]);
        } else if (e < L::kVec) {  // b1
          acc_v[j] += sm[L::kDH + q * (CM + 4) + e - 2 * C];
        }
      }
    }
    __syncthreads();
  }

  // This CTA's partial sums, in the workspace's entry order.
  float* out = partial + int64_t{blockIdx.x} * S::kEntries;
  constexpr int kOffW1 = C * C, kOffB1 = kOffW1 + CM * C, kOffW2 = kOffB1 + CM,
                kOffB2 = kOffW2 + C * CM, kOffGate = kOffB2 + C;
#pragma unroll
  for (int r = 0; r < OS::kR; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) out[(s_r0 + r) * C + s_c0 + c] = acc_s[r][c];
#pragma unroll
  for (int r = 0; r < O1::kR; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) out[kOffW1 + (w1_r0 + r) * C + w1_c0 + c] = acc_1[r][c];
#pragma unroll
  for (int r = 0; r < O2::kR; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) out[kOffW2 + (w2_r0 + r) * CM + w2_c0 + c] = acc_2[r][c];
#pragma unroll
  for (int j = 0; j < L::kVecPerThread; ++j) {
    const int e = t + j * L::kP;
    if (e < C) {
      out[kOffB2 + e] = acc_v[j];
    } else if (e < 2 * C) {
      out[kOffGate + e - C] = acc_v[j];
    } else if (e < L::kVec) {
      out[kOffB1 + e - 2 * C] = acc_v[j];
    }
  }
}

// Sums the per-CTA partials over CTAs, in CTA order, into the gradients.
__global__ void reduce_partials_kernel(const float* __restrict__ partial, int ctas, int entries,
                                       int c, int cm, BlockTailGrads g) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  float acc = 0.f;
  for (int k = 0; k < ctas; ++k) acc += partial[int64_t{k} * entries + e];
  int r = e;
  if (r < c * c) {
    g.w_skip[r] = acc;
    return;
  }
  r -= c * c;
  if (r < cm * c) {
    g.w1[r] = acc;
    return;
  }
  r -= cm * c;
  if (r < cm) {
    g.b1[r] = acc;
    return;
  }
  r -= cm;
  if (r < c * cm) {
    g.w2[r] = acc;
    return;
  }
  r -= c * cm;
  if (r < c) {
    g.b2[r] = acc;
    return;
  }
  g.gate[r - c] = acc;
}

// ---------------------------------------------------------------------------
// Launchers
// ---------------------------------------------------------------------------
int device_sms() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return std::max(sms, 1);
}

// A persistent grid: at most `per_sm` CTAs per multiprocessor, fewer on small inputs.
int64_t blocks_for(int64_t points, int threads, int per_sm) {
  const int64_t needed = (points + threads - 1) / threads;
  return std::max<int64_t>(1, std::min<int64_t>(needed, int64_t{device_sms()} * per_sm));
}

// Backward CTAs per multiprocessor, from the shared memory a CTA takes (228 KiB
// per multiprocessor on Hopper, 1 KiB of it reserved per CTA) alone, so that
// the workspace's size does not depend on the dtype's register count.
template <int C, int CM>
int backward_per_sm() {
  constexpr int64_t per_cta = BwdLayout<C, CM>::kBytes + 1024;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(4, (228 * 1024) / per_cta)));
}

template <typename T, int C, int CM>
struct Forward {
  static int run(const void* a, const void* s, void* z, void* y1, int64_t batch, int64_t n,
                 const BlockTailWeights& w, bool gelu_mid, cudaStream_t stream) {
    const int64_t points = batch * n;
    if (points == 0) return cudaSuccess;
    auto kernel = gelu_mid ? forward_kernel<T, C, CM, true> : forward_kernel<T, C, CM, false>;
    static const int per_sm[2] = {occupancy(forward_kernel<T, C, CM, false>),
                                  occupancy(forward_kernel<T, C, CM, true>)};
    const auto blocks = blocks_for(points, kFwdThreads, per_sm[gelu_mid]);
    kernel<<<static_cast<unsigned>(blocks), kFwdThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(s), static_cast<T*>(z), static_cast<T*>(y1),
        n, points, w);
    return cudaGetLastError();
  }
  template <typename K>
  static int occupancy(K kernel) {
    int blocks = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kFwdThreads, 0);
    return std::max(blocks, 1);
  }
};

template <typename T, int C, int CM>
struct Backward {
  template <bool kGeluIn, bool kGeluMid>
  static int launch(const void* dz, const void* in, const void* y1, void* da, void* ds,
                    int64_t points, int64_t n, int blocks, const BlockTailWeights& w,
                    float* workspace, cudaStream_t stream) {
    auto kernel = backward_kernel<T, C, CM, kGeluIn, kGeluMid>;
    constexpr size_t bytes = BwdLayout<C, CM>::kBytes;
    static const cudaError_t attr = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (attr != cudaSuccess) return attr;
    kernel<<<blocks, kBwdThreads, bytes, stream>>>(
        static_cast<const T*>(dz), static_cast<const T*>(in), static_cast<const T*>(y1),
        static_cast<T*>(da), static_cast<T*>(ds), n, points, w, workspace);
    return cudaGetLastError();
  }

  static int run(const void* dz, const void* in, const void* y1, void* da, void* ds, int64_t batch,
                 int64_t n, const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                 bool gelu_mid, float* workspace, cudaStream_t stream) {
    const int64_t points = batch * n;
    constexpr int entries = Shape<C, CM>::kEntries;
    const int blocks = static_cast<int>(blocks_for(points, kBwdThreads, backward_per_sm<C, CM>()));
    if (points > 0) {
      const auto f = gelu_input ? (gelu_mid ? &launch<true, true> : &launch<true, false>)
                                : (gelu_mid ? &launch<false, true> : &launch<false, false>);
      if (const int err = f(dz, in, y1, da, ds, points, n, blocks, w, workspace, stream))
        return err;
    } else {
      cudaMemsetAsync(workspace, 0, sizeof(float) * entries, stream);
    }
    reduce_partials_kernel<<<(entries + 255) / 256, 256, 0, stream>>>(
        workspace, points > 0 ? blocks : 1, entries, C, CM, g);
    return cudaGetLastError();
  }

  static int64_t workspace(int64_t points) {
    return Shape<C, CM>::kEntries * blocks_for(points, kBwdThreads, backward_per_sm<C, CM>());
  }
};

// Op<T, C, CM>::run(args...) for the run-time dtype and shape. Only the seed
// model's width is compiled (C = 32, Cmid = 16): the kernels are written for
// any multiple of 4 (within the backward's shared memory), but a wider
// instantiation spills its per-point registers and takes ptxas minutes; other
// shapes run the LibTorch path.
template <template <typename, int, int> class Op, typename T, typename... Args>
int by_shape(int64_t channels, int64_t mid, Args&&... args) {
  if (channels == 32 && mid == 16) return Op<T, 32, 16>::run(std::forward<Args>(args)...);
  return cudaErrorInvalidValue;
}

template <template <typename, int, int> class Op, typename... Args>
int dispatch(Dtype dtype, int64_t channels, int64_t mid, Args&&... args) {
  switch (dtype) {
    case Dtype::kFloat:
      return by_shape<Op, float>(channels, mid, std::forward<Args>(args)...);
    case Dtype::kBFloat16:
      return by_shape<Op, __nv_bfloat16>(channels, mid, std::forward<Args>(args)...);
    case Dtype::kHalf:
      return by_shape<Op, __half>(channels, mid, std::forward<Args>(args)...);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool block_tail_supported(int64_t channels, int64_t mid) { return channels == 32 && mid == 16; }

int block_tail_forward(Dtype dtype, const void* a, const void* s, void* z, void* y1, int64_t batch,
                       int64_t channels, int64_t mid, int64_t n, const BlockTailWeights& w,
                       bool gelu_mid, void* stream) {
  return dispatch<Forward>(dtype, channels, mid, a, s, z, y1, batch, n, w, gelu_mid,
                           static_cast<cudaStream_t>(stream));
}

int64_t block_tail_backward_workspace(int64_t batch, int64_t channels, int64_t mid, int64_t n) {
  if (channels == 32 && mid == 16) return Backward<float, 32, 16>::workspace(batch * n);
  return 0;
}

int block_tail_backward(Dtype dtype, const void* dz, const void* in, const void* y1, void* da,
                        void* ds, int64_t batch, int64_t channels, int64_t mid, int64_t n,
                        const BlockTailWeights& w, const BlockTailGrads& g, bool gelu_input,
                        bool gelu_mid, float* workspace, void* stream) {
  return dispatch<Backward>(dtype, channels, mid, dz, in, y1, da, ds, batch, n, w, g, gelu_input,
                            gelu_mid, workspace, static_cast<cudaStream_t>(stream));
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace fno::cuda
