// The channel MLP's backward (channel_mlp.h).
//
// backward_kernel<..., KM>, for hidden layers up to KM = 64 or 128 wide (128
// where the CTA's partial sums fit its tiles' space): a CTA takes tiles of
// kBwdPoints grid points. First two threads per point recompute half of its
// h each from x, then GELU(h) and dh = GELU'(h) * (W2^T dy), and write dx;
// GELU(h), dh, dy and act(x) go to shared memory, point-major. Then the CTA
// adds the tile to its weight-gradient sums, dW2 = dy GELU(h)^T and dW1 =
// dh act(x)^T (and the biases'), lane l owning hidden units KM/32 l .. + KM/32 - 1:
// the wide product's rows (Cout or Cin of 20 or 32) are split over the warps and
// read as broadcasts; the narrow one's points are split over the warps.
// After its last tile the CTA writes its partial sums, and reduce_kernel adds
// the CTAs' in order (deterministic). The hidden layer [B, Cmid, N] is never
// stored, and the weight gradients take no GEMM over it (batched GEMMs with a
// 64 x 32 output per batch entry and a reduction as long as the grid leave
// most of the GPU idle).
//
// hidden_grad_kernel, for wider hidden layers: one thread per grid point, as
// the forward, writes g = GELU(h) and dh for the weight-gradient GEMMs.
#include "channel_mlp.cuh"

#include <algorithm>

namespace fno::cuda {
namespace detail::mlp {
namespace {

template <typename T, int IN, int OUT>
__global__ void __launch_bounds__(kThreads)
    hidden_grad_kernel(const T* __restrict__ x, int64_t x_batch, int64_t x_channel,
                       const T* __restrict__ dy, int64_t dy_batch, int64_t dy_channel,
                       T* __restrict__ g_out, T* __restrict__ dh_out, int64_t n, int64_t points,
                       int mid, ChannelMlpWeights w, bool gelu_input) {
  using S = Smem<IN, OUT>;
  extern __shared__ __align__(16) float sw[];
  load_weights<T, IN, OUT>(sw, mid, w);
  __syncthreads();
  const float* w2t = sw + S::w2t(mid);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < points; p += stride) {
    const int64_t b = p / n, i = p - b * n;
    float v[IN];
    load_input<T, IN>(v, x, x_batch, x_channel, b, i, gelu_input);
    float d[OUT];
    const T* dp = dy + b * dy_batch + i;
#pragma unroll
    for (int o = 0; o < OUT; ++o) d[o] = load(dp + o * dy_channel);
    T* gp = g_out + b * mid * n + i;
    T* hp = dh_out + b * mid * n + i;
#pragma unroll 2
    for (int k = 0; k < mid; ++k) {
      float g, dg;
      gelu_and_grad_fast(hidden<T, IN>(sw, mid, k, v), g, dg);
      const float t = dot<OUT>(w2t + k * OUT, d, 0.f);
      store(gp + k * n, g);
      store(hp + k * n, dg * round_to<T>(t));
    }
  }
}

template <typename T, int IN, int OUT>
struct HiddenGrad {
  static int run(ChannelMlpInput x, ChannelMlpInput dy, void* g, void* dh, int64_t batch,
                 int64_t mid, int64_t n, ChannelMlpWeights w, bool gelu_input,
                 cudaStream_t stream) {
    const int64_t points = batch * n;
    if (points == 0) return 0;
    const auto bytes = static_cast<size_t>(Smem<IN, OUT>::floats(static_cast<int>(mid))) * 4;
    const int64_t blocks = blocks_for(points, kThreads, 8);
    hidden_grad_kernel<T, IN, OUT><<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(
        static_cast<const T*>(x.data), x.batch_stride, x.channel_stride,
        static_cast<const T*>(dy.data), dy.batch_stride, dy.channel_stride, static_cast<T*>(g),
        static_cast<T*>(dh), n, points, static_cast<int>(mid), w, gelu_input);
    return static_cast<int>(cudaGetLastError());
  }
};

// ---------------------------------------------------------------------------
// The whole backward, with per-CTA weight-gradient sums
// ---------------------------------------------------------------------------
constexpr int kBwdWarps = 4;
constexpr int kBwdThreads = 32 * kBwdWarps;
constexpr int kBwdPoints =
    kBwdThreads / 2;  // two threads per grid point: half the hidden units each
// KM, the widest hidden layer a kernel takes: 64 (two hidden units per lane
// in the weight-gradient sums) or 128 (four, for the 128-wide projections).
// CTAs per multiprocessor: at KM = 64 four fit the shared memory, and a wide
// input's registers (act(x) and dx's sums, up to 32 each) leave room for
// three; at KM = 128 the GELU(h) and dh tiles take twice the space: two.
constexpr int bwd_per_sm(int64_t in, int km) { return km > 64 ? 2 : in > 4 ? 3 : 4; }
// The points an fp32 partial of a weight gradient sums before it is added to
// the lane's fp64 sum (the narrow operands' sums take a warp's quarter of a
// tile, kBwdPoints / kBwdWarps points: one chunk).
constexpr int kChunk = 16;
static_assert(kBwdPoints % kChunk == 0, "whole chunks a tile");

// acc += t, element by element, in fp64.
template <int N>
__device__ __forceinline__ void add_to(double (&acc)[N], const float (&t)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] += t[i];
}
template <int M, int N>
__device__ __forceinline__ void add_to(double (&acc)[M][N], const float (&t)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i) add_to(acc[i], t[i]);
}
// GELU(h) and dh rows: 16-byte float4 stores, no conflicts
constexpr int h_stride(int km) { return km + 4; }

// An operand of R channels kept point-major in shared memory, [kBwdPoints][kStride]
// (float4 stores by the point's thread without bank conflicts), and how the
// weight-gradient sums read it: R = 20 or 32 splits its rows over the warps
// (each reads its rows as broadcasts at every point: 5 scalar or 8 as two
// float4 loads); R <= 4 leaves each warp every row at a quarter of the points.
template <int R>
struct Operand {
  static_assert(R <= 4 || (R % 4 == 0 && R % kBwdWarps == 0),
                "operand widths: up to 4, or a multiple of 4 split over the warps");
  static constexpr bool kSplit = R > 4;
  static constexpr int kStride = kSplit ? R + 4 : 4;
  static constexpr int kRows = kSplit ? R / kBwdWarps : R;  // a warp's rows
};

// A narrow (<= 4) or split operand's row stride, as Operand's, for any width.
constexpr int operand_stride(int r) { return r > 4 ? r + 4 : 4; }

// Whether the warps' partial sums of a KM-wide hidden layer fit the space of
// the tiles they reuse (Cin x Cout x KM; 20 x 20 x 128 does not).
constexpr bool bwd_fits(int in, int out, int km) {
  return kBwdWarps * (km * (in + 1) + out * (km + 1)) <=
         kBwdPoints * (2 * h_stride(km) + operand_stride(out) + operand_stride(in));
}

// Shared memory (floats): the weights (Smem), then GELU(h) and dh [P][h_stride(KM)],
// dy [P][Operand<OUT>::kStride] and act(x) [P][Operand<IN>::kStride]; after the
// last tile, the warps' partial sums reuse the four.
template <int IN, int OUT, int KM>
struct BwdLayout {
  static constexpr int kHStride = h_stride(KM);
  __host__ __device__ static int g(int mid) { return (Smem<IN, OUT>::floats(mid) + 3) / 4 * 4; }
  __host__ __device__ static int dh(int mid) { return g(mid) + kBwdPoints * kHStride; }
  __host__ __device__ static int dy(int mid) { return dh(mid) + kBwdPoints * kHStride; }
  __host__ __device__ static int a(int mid) { return dy(mid) + kBwdPoints * Operand<OUT>::kStride; }
  __host__ __device__ static int floats(int mid) {
    return a(mid) + kBwdPoints * Operand<IN>::kStride;
  }
  // The partial sums, in the gradients' order: w1 [mid][IN], b1, w2 [OUT][mid], b2.
  __host__ __device__ static int entries(int mid) { return mid * (IN + 1) + OUT * (mid + 1); }
  static_assert(bwd_fits(IN, OUT, KM), "the warps' partial sums fit the tile's space");
};

// U consecutive floats of shared memory, 8- or 16-byte aligned (U = 2 or 4).
template <int U>
__device__ __forceinline__ void load_units(float (&v)[U], const float* p) {
  static_assert(U == 2 || U == 4, "two or four hidden units a lane");
  if constexpr (U == 2) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    v[0] = q.x, v[1] = q.y;
  } else {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  }
}

// R values from a point-major row of a narrow operand (R <= 4: its stride is
// 4, one float4), else as load_row.
template <int R>
__device__ __forceinline__ void load_operand(float (&v)[R], const float* p) {
  if constexpr (R < 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    const float e[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < R; ++j) v[j] = e[j];
  } else {
    load_row<R>(v, p);
  }
}

// A point's R channels into its point-major row (float4 stores; zeros in the
// padding of a narrow operand's row).
template <int R>
__device__ __forceinline__ void store_operand(float* p, const float (&v)[R]) {
  constexpr int kWidth = Operand<R>::kSplit ? R : 4;
#pragma unroll
  for (int j = 0; j < kWidth; j += 4) {
    float e[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) e[k] = j + k < R ? v[j + k < R ? j + k : 0] : 0.f;
    *reinterpret_cast<float4*>(p + j) = make_float4(e[0], e[1], e[2], e[3]);
  }
}

template <typename T, int IN, int OUT, int KM>
__global__ void __launch_bounds__(kBwdThreads, bwd_per_sm(IN, KM))
    backward_kernel(const T* __restrict__ x, int64_t x_batch, int64_t x_channel,
                    const T* __restrict__ dy, int64_t dy_batch, int64_t dy_channel,
                    T* __restrict__ dx, int64_t n, int64_t points, int mid, ChannelMlpWeights w,
                    bool gelu_input, float* __restrict__ partial) {
  using S = Smem<IN, OUT>;
  using L = BwdLayout<IN, OUT, KM>;
  constexpr int kHStride = L::kHStride;
  constexpr int U = KM / 32;  // the hidden units a lane owns in the sums
  using OY = Operand<OUT>;
  using OA = Operand<IN>;
  extern __shared__ __align__(16) float sm[];
  load_weights<T, IN, OUT>(sm, mid, w);
  const float* w2t = sm + S::w2t(mid);
  float* s_g = sm + L::g(mid);
  float* s_dh = sm + L::dh(mid);
  float* s_dy = sm + L::dy(mid);
  float* s_a = sm + L::a(mid);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Phase 1: warp w takes points 16 w .. 16 w + 15, lane l point l % 16 and
  // hidden units KM / 2 (l / 16) .. + KM / 2 - 1.
  const int pt = warp * 16 + (lane & 15), half = lane >> 4;
  // Phase 2: this lane's sums for hidden units k = U lane + e: dW2[o][k] over
  // the warp's dy rows, dW1[k][c] over its act(x) rows, db1[k]; db2 over dy
  // row `lane` (wide dy) or over the warp's rows (the same in every lane).
  // Each sum is hierarchical: fp32 over at most kChunk points (a fresh
  // accumulator), then those chunk sums in fp64 over the CTA's tiles, so no
  // fp32 accumulator ever sums more than kChunk terms, at any grid
  // (docs/parity.md: a serial fp32 sum over a CTA's share of 6 x 2400^2
  // points drifted to 1.9e-3 on the projection's bias).
  double acc_w2[OY::kRows][U] = {}, acc_w1[OA::kRows][U] = {}, acc_b1[U] = {};
  double acc_b2[OY::kSplit ? 1 : OY::kRows] = {};
  const int y0 = OY::kSplit ? warp * OY::kRows : 0, a0 = OA::kSplit ? warp * OA::kRows : 0;
  const int64_t tiles = (points + kBwdPoints - 1) / kBwdPoints;
  __syncthreads();
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // 1. The point's act(x) and dy, its half of GELU(h) and dh, and dx.
    const int64_t q = tile * kBwdPoints + pt;
    const bool valid = q < points;
    float v[IN] = {}, d[OUT] = {};
    int64_t b = 0, i = 0;
    if (valid) {
      b = q / n, i = q - b * n;
      load_input<T, IN>(v, x, x_batch, x_channel, b, i, gelu_input);
      const T* dp = dy + b * dy_batch + i;
#pragma unroll
      for (int o = 0; o < OUT; ++o) d[o] = load(dp + o * dy_channel);
    }
    if (half == 0) {
      store_operand<IN>(s_a + pt * OA::kStride, v);
      store_operand<OUT>(s_dy + pt * OY::kStride, d);
    }
    float gx[IN] = {};
    const int k_begin = half * (KM / 2);
    float* g_row = s_g + pt * kHStride + k_begin;
    float* dh_row = s_dh + pt * kHStride + k_begin;
#pragma unroll 1
    for (int kk = 0; kk < KM / 2; kk += 4) {
      float gq[4], dq[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k = k_begin + kk + j;
        gq[j] = dq[j] = 0.f;
        if (k < mid && valid) {
          float g, dg;
          gelu_and_grad_fast(hidden<T, IN>(sm, mid, k, v), g, dg);
          const float t = dot<OUT>(w2t + k * OUT, d, 0.f);
          gq[j] = round_to<T>(g);
          dq[j] = round_to<T>(dg * round_to<T>(t));
          if (dx != nullptr) {
            float wk[IN];
            load_row<IN>(wk, sm + k * IN);
#pragma unroll
            for (int c = 0; c < IN; ++c) gx[c] = fmaf(wk[c], dq[j], gx[c]);
          }
        }
      }
      *reinterpret_cast<float4*>(g_row + kk) = make_float4(gq[0], gq[1], gq[2], gq[3]);
      *reinterpret_cast<float4*>(dh_row + kk) = make_float4(dq[0], dq[1], dq[2], dq[3]);
    }
    if (dx != nullptr) {
      // The two halves' W1^T dh added (lane and lane ^ 16), stored in T as the
      // LibTorch path stores it, then times GELU'(x) in T.
#pragma unroll
      for (int c = 0; c < IN; ++c) gx[c] += __shfl_xor_sync(0xffffffffu, gx[c], 16);
      if (valid && half == 0) {
        T* out = dx + b * IN * n + i;
        const T* xp = x + b * x_batch + i;
#pragma unroll
        for (int c = 0; c < IN; ++c) {
          float r = round_to<T>(gx[c]);
          if (gelu_input) {
            float g, dg;
            gelu_and_grad_fast(load(xp + c * x_channel), g, dg);
            r *= dg;
          }
          store(out + c * n, r);
        }
      }
    }
    __syncthreads();
    // 2. The tile's share of the weight gradients. Wide operands: the warp's
    // rows at every point.
    const float* g_col = s_g + U * lane;
    const float* dh_col = s_dh + U * lane;
    if constexpr (OY::kSplit || OA::kSplit) {
#pragma unroll 1
      for (int p0 = 0; p0 < kBwdPoints; p0 += kChunk) {
        float t_w2[OY::kSplit ? OY::kRows : 1][U] = {}, t_w1[OA::kSplit ? OA::kRows : 1][U] = {};
#pragma unroll 4
        for (int p = p0; p < p0 + kChunk; ++p) {
          if constexpr (OY::kSplit) {
            float gu[U];
            load_units<U>(gu, g_col + p * kHStride);
            float y[OY::kRows];
            load_operand<OY::kRows>(y, s_dy + p * OY::kStride + y0);
#pragma unroll
            for (int r = 0; r < OY::kRows; ++r) {
#pragma unroll
              for (int e = 0; e < U; ++e) t_w2[r][e] = fmaf(y[r], gu[e], t_w2[r][e]);
            }
          }
          if constexpr (OA::kSplit) {
            float du[U];
            load_units<U>(du, dh_col + p * kHStride);
            float a[OA::kRows];
            load_operand<OA::kRows>(a, s_a + p * OA::kStride + a0);
#pragma unroll
            for (int r = 0; r < OA::kRows; ++r) {
#pragma unroll
              for (int e = 0; e < U; ++e) t_w1[r][e] = fmaf(a[r], du[e], t_w1[r][e]);
            }
          }
        }
        if constexpr (OY::kSplit) add_to(acc_w2, t_w2);
        if constexpr (OA::kSplit) add_to(acc_w1, t_w1);
      }
    }
    // Narrow operands, db1 and db2: every row at the warp's quarter of the
    // points (kBwdPoints / kBwdWarps = kChunk of them).
    static_assert(kBwdPoints / kBwdWarps <= kChunk, "a warp's narrow sums: one chunk a tile");
    {
      float t_b1[U] = {}, t_b2[OY::kSplit ? 1 : OY::kRows] = {};
      float t_w2[OY::kSplit ? 1 : OY::kRows][U] = {}, t_w1[OA::kSplit ? 1 : OA::kRows][U] = {};
#pragma unroll 4
      for (int p = warp; p < kBwdPoints; p += kBwdWarps) {
        float du[U];
        load_units<U>(du, dh_col + p * kHStride);
#pragma unroll
        for (int e = 0; e < U; ++e) t_b1[e] += du[e];
        if constexpr (OY::kSplit) {
          if (lane < OUT) t_b2[0] += s_dy[p * OY::kStride + lane];
        } else {
          float gu[U];
          load_units<U>(gu, g_col + p * kHStride);
          float y[OY::kRows];
          load_operand<OY::kRows>(y, s_dy + p * OY::kStride);
#pragma unroll
          for (int r = 0; r < OY::kRows; ++r) {
#pragma unroll
            for (int e = 0; e < U; ++e) t_w2[r][e] = fmaf(y[r], gu[e], t_w2[r][e]);
            t_b2[r] += y[r];
          }
        }
        if constexpr (!OA::kSplit) {
          float a[OA::kRows];
          load_operand<OA::kRows>(a, s_a + p * OA::kStride);
#pragma unroll
          for (int r = 0; r < OA::kRows; ++r) {
#pragma unroll
            for (int e = 0; e < U; ++e) t_w1[r][e] = fmaf(a[r], du[e], t_w1[r][e]);
          }
        }
      }
      add_to(acc_b1, t_b1);
      add_to(acc_b2, t_b2);
      if constexpr (!OY::kSplit) add_to(acc_w2, t_w2);
      if constexpr (!OA::kSplit) add_to(acc_w1, t_w1);
    }
    __syncthreads();
  }
  // 3. The CTA's partial sums: the warps' fp64 sums added into one fp64 slot in
  // warp order (deterministic; each entry a warp holds belongs to one of its
  // lanes), stored once rounded to fp32 (the CTAs' partials are then added in
  // fp64: rounding each of a few hundred partials once costs what a tree sum
  // does, and keeps the workspace, which small grids spend most time on, fp32).
  const int entries = L::entries(mid);
  const int ob1 = mid * IN, ow2 = ob1 + mid, ob2 = ow2 + OUT * mid;
  double* red = reinterpret_cast<double*>(s_g);
  for (int e = tid; e < entries; e += kBwdThreads) red[e] = 0.0;
  __syncthreads();
  for (int w = 0; w < kBwdWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int e = 0; e < U; ++e) {
        const int k = U * lane + e;
        if (k >= mid) continue;
#pragma unroll
        for (int r = 0; r < OA::kRows; ++r) red[k * IN + a0 + r] += acc_w1[r][e];
        red[ob1 + k] += acc_b1[e];
#pragma unroll
        for (int r = 0; r < OY::kRows; ++r) red[ow2 + (y0 + r) * mid + k] += acc_w2[r][e];
      }
      if constexpr (OY::kSplit) {
        if (lane < OUT) red[ob2 + lane] += acc_b2[0];
      } else if (lane == 0) {
#pragma unroll
        for (int r = 0; r < OY::kRows; ++r) red[ob2 + r] += acc_b2[r];
      }
    }
    __syncthreads();
  }
  float* out = partial + int64_t{blockIdx.x} * entries;
  for (int e = tid; e < entries; e += kBwdThreads) out[e] = static_cast<float>(red[e]);
}

// The weight gradients from `ctas` CTAs' partial sums, added in CTA order in
// fp64 (deterministic), rounded once to fp32.
__global__ void reduce_kernel(const float* __restrict__ partial, int ctas, int mid, int in, int out,
                              ChannelMlpGrads g) {
  const int entries = mid * (in + 1) + out * (mid + 1);
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  double acc = 0.0;
  for (int k = 0; k < ctas; ++k) acc += partial[int64_t{k} * entries + e];
  const float s = static_cast<float>(acc);
  const int ob1 = mid * in, ow2 = ob1 + mid, ob2 = ow2 + out * mid;
  if (e < ob1) {
    g.w1[e] = s;
  } else if (e < ow2) {
    if (g.b1 != nullptr) g.b1[e - ob1] = s;
  } else if (e < ob2) {
    g.w2[e - ow2] = s;
  } else if (g.b2 != nullptr) {
    g.b2[e - ob2] = s;
  }
}

// The kernel's KM for a hidden layer `mid` wide.
constexpr int km_for(int64_t mid) { return mid <= 64 ? 64 : 128; }

int64_t backward_ctas(int64_t points, int64_t in, int km) {
  return std::max<int64_t>(1, std::min<int64_t>((points + kBwdPoints - 1) / kBwdPoints,
                                                int64_t{device_sms()} * bwd_per_sm(in, km)));
}

template <typename T, int IN, int OUT, int KM>
int launch_backward(ChannelMlpInput x, ChannelMlpInput dy, void* dx, int64_t points, int64_t ctas,
                    int64_t mid, int64_t n, ChannelMlpWeights w, bool gelu_input, float* workspace,
                    cudaStream_t stream) {
  using L = BwdLayout<IN, OUT, KM>;
  const auto kernel = backward_kernel<T, IN, OUT, KM>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(sizeof(float) * L::floats(KM)));
  if (attr != cudaSuccess) return static_cast<int>(attr);
  const auto bytes = sizeof(float) * static_cast<size_t>(L::floats(static_cast<int>(mid)));
  kernel<<<static_cast<unsigned>(ctas), kBwdThreads, bytes, stream>>>(
      static_cast<const T*>(x.data), x.batch_stride, x.channel_stride,
      static_cast<const T*>(dy.data), dy.batch_stride, dy.channel_stride, static_cast<T*>(dx), n,
      points, static_cast<int>(mid), w, gelu_input, workspace);
  return static_cast<int>(cudaGetLastError());
}

template <typename T, int IN, int OUT>
struct Backward {
  static int run(ChannelMlpInput x, ChannelMlpInput dy, void* dx, int64_t batch, int64_t mid,
                 int64_t n, ChannelMlpWeights w, bool gelu_input, float* workspace,
                 ChannelMlpGrads g, cudaStream_t stream) {
    const int64_t points = batch * n;
    const int entries = static_cast<int>(mid * (IN + 1) + OUT * (mid + 1));
    const int km = km_for(mid);
    int64_t ctas = backward_ctas(points, IN, km);
    if (points == 0) {
      ctas = 1;
      if (const auto err = cudaMemsetAsync(workspace, 0, sizeof(float) * entries, stream))
        return static_cast<int>(err);
    } else {
      int err = static_cast<int>(cudaErrorInvalidValue);
      if (km == 64) {
        err = launch_backward<T, IN, OUT, 64>(x, dy, dx, points, ctas, mid, n, w, gelu_input,
                                              workspace, stream);
      } else if constexpr (bwd_fits(IN, OUT, 128)) {
        err = launch_backward<T, IN, OUT, 128>(x, dy, dx, points, ctas, mid, n, w, gelu_input,
                                               workspace, stream);
      }
      if (err != 0) return err;
    }
    reduce_kernel<<<(entries + 255) / 256, 256, 0, stream>>>(workspace, static_cast<int>(ctas),
                                                             static_cast<int>(mid), IN, OUT, g);
    return static_cast<int>(cudaGetLastError());
  }
};

}  // namespace
}  // namespace detail::mlp

bool channel_mlp_backward_supported(int64_t in, int64_t mid, int64_t out) {
  using detail::mlp::bwd_fits;
  return channel_mlp_supported(in, mid, out) &&
         (mid <= 64 || (mid <= kMaxChannelMlpBackwardMid &&
                        bwd_fits(static_cast<int>(in), static_cast<int>(out), 128)));
}

int64_t channel_mlp_backward_workspace(int64_t batch, int64_t in, int64_t mid, int64_t out,
                                       int64_t n) {
  return detail::mlp::backward_ctas(batch * n, in, detail::mlp::km_for(mid)) *
         (mid * (in + 1) + out * (mid + 1));
}

int channel_mlp_backward(Dtype dtype, ChannelMlpInput x, ChannelMlpInput dy, void* dx,
                         int64_t batch, int64_t in, int64_t mid, int64_t out, int64_t n,
                         const ChannelMlpWeights& w, bool gelu_input, float* workspace,
                         const ChannelMlpGrads& g, void* stream) {
  if (!channel_mlp_backward_supported(in, mid, out)) return static_cast<int>(cudaErrorInvalidValue);
  return detail::mlp::dispatch<detail::mlp::Backward>(dtype, in, out, x, dy, dx, batch, mid, n, w,
                                                      gelu_input, workspace, g,
                                                      static_cast<cudaStream_t>(stream));
}

int channel_mlp_hidden_grad(Dtype dtype, ChannelMlpInput x, ChannelMlpInput dy, void* g, void* dh,
                            int64_t batch, int64_t in, int64_t mid, int64_t out, int64_t n,
                            const ChannelMlpWeights& w, bool gelu_input, void* stream) {
  if (!channel_mlp_supported(in, mid, out)) return static_cast<int>(cudaErrorInvalidValue);
  return detail::mlp::dispatch<detail::mlp::HiddenGrad>(dtype, in, out, x, dy, g, dh, batch, mid, n,
                                                        w, gelu_input,
                                                        static_cast<cudaStream_t>(stream));
}

}  // namespace fno::cuda
