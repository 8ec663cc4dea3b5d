// The channel MLP's forward (channel_mlp.h): one thread per grid point, its
// input and output channels in registers, the hidden layer one unit at a time
// (h, GELU, then its share of every output), the weights in shared memory
// read at uniform addresses (broadcasts).
#include "channel_mlp.cuh"

namespace fno::cuda {
namespace detail::mlp {
namespace {

template <typename T, int IN, int OUT>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ x, int64_t x_batch, int64_t x_channel, T* __restrict__ y,
                   int64_t n, int64_t points, int mid, ChannelMlpWeights w, bool gelu_input) {
  using S = Smem<IN, OUT>;
  extern __shared__ __align__(16) float sw[];
  load_weights<T, IN, OUT>(sw, mid, w);
  __syncthreads();
  const float* w2t = sw + S::w2t(mid);
  const float* b2 = sw + S::b2(mid);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < points; p += stride) {
    const int64_t b = p / n, i = p - b * n;
    float v[IN];
    load_input<T, IN>(v, x, x_batch, x_channel, b, i, gelu_input);
    float acc[OUT];
#pragma unroll
    for (int o = 0; o < OUT; ++o) acc[o] = b2[o];
#pragma unroll 2
    for (int k = 0; k < mid; ++k) {
      const float g = round_to<T>(gelu_fast(hidden<T, IN>(sw, mid, k, v)));
      float row[OUT];
      load_row<OUT>(row, w2t + k * OUT);
#pragma unroll
      for (int o = 0; o < OUT; ++o) acc[o] = fmaf(row[o], g, acc[o]);
    }
    T* out = y + b * OUT * n + i;
#pragma unroll
    for (int o = 0; o < OUT; ++o) store(out + o * n, acc[o]);
  }
}

template <typename T, int IN, int OUT>
struct Forward {
  static int run(ChannelMlpInput x, void* y, int64_t batch, int64_t mid, int64_t n,
                 ChannelMlpWeights w, bool gelu_input, cudaStream_t stream) {
    const int64_t points = batch * n;
    if (points == 0) return 0;
    const auto bytes = static_cast<size_t>(Smem<IN, OUT>::floats(static_cast<int>(mid))) * 4;
    const int64_t blocks = blocks_for(points, kThreads, 8);
    forward_kernel<T, IN, OUT><<<static_cast<unsigned>(blocks), kThreads, bytes, stream>>>(
        static_cast<const T*>(x.data), x.batch_stride, x.channel_stride, static_cast<T*>(y), n,
        points, static_cast<int>(mid), w, gelu_input);
    return static_cast<int>(cudaGetLastError());
  }
};

}  // namespace
}  // namespace detail::mlp

bool channel_mlp_supported(int64_t in, int64_t mid, int64_t out) {
  bool shape = false;
  for (const auto& c : kCompiledChannelMlps) shape = shape || (in == c.in && out == c.out);
  return shape && mid >= 1 && mid <= kMaxChannelMlpMid;
}

int channel_mlp_forward(Dtype dtype, ChannelMlpInput x, void* y, int64_t batch, int64_t in,
                        int64_t mid, int64_t out, int64_t n, const ChannelMlpWeights& w,
                        bool gelu_input, void* stream) {
  if (!channel_mlp_supported(in, mid, out)) return static_cast<int>(cudaErrorInvalidValue);
  return detail::mlp::dispatch<detail::mlp::Forward>(dtype, in, out, x, y, batch, mid, n, w,
                                                     gelu_input, static_cast<cudaStream_t>(stream));
}

}  // namespace fno::cuda
