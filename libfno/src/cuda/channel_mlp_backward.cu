// The channel MLP's backward, per grid point (channel_mlp.h): h recomputed
// from x, then g = GELU(h) and dh = GELU'(h) * (W2^T dy) written for the
// weight-gradient GEMMs. One thread per grid point, as the forward.
#include "channel_mlp.cuh"

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
      const float* row = w2t + k * OUT;
      float t = 0.f;
#pragma unroll
      for (int o = 0; o < OUT; ++o) t = fmaf(row[o], d[o], t);
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

}  // namespace
}  // namespace detail::mlp

int channel_mlp_hidden_grad(Dtype dtype, ChannelMlpInput x, ChannelMlpInput dy, void* g, void* dh,
                            int64_t batch, int64_t in, int64_t mid, int64_t out, int64_t n,
                            const ChannelMlpWeights& w, bool gelu_input, void* stream) {
  if (!channel_mlp_supported(in, mid, out)) return static_cast<int>(cudaErrorInvalidValue);
  return detail::mlp::dispatch<detail::mlp::HiddenGrad>(dtype, in, out, x, dy, g, dh, batch, mid, n,
                                                        w, gelu_input,
                                                        static_cast<cudaStream_t>(stream));
}

}  // namespace fno::cuda
