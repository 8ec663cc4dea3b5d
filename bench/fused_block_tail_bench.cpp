// Times the fused block-tail kernels (libfno/src/cuda/block_tail_*.cu) at
// [B, C, grid^2] and reports the achieved HBM bandwidth (bytes the kernel must
// read and write, over its time) and fp32 rate next to the device's, and the
// LibTorch (unfused) block_tail's forward and backward times.
//
//   fused_block_tail_bench --batch 8 --channels 32 --grid 1024 --dtypes float,3xtf32,tf32,bf16,half
//
// float: fp32 activations, the default where TF32 is not allowed (FFMA
// forward, 3xTF32 tensor-core backward: the 3xtf32 row's); 3xtf32: fp32 on the tensor-core kernels
// in 3xTF32 (fp32-level error, FNO_BLOCK_TAIL_FP32=3xtf32); tf32: fp32 activations with TF32
// allowed (fno::MatmulPrecisionGuard), plain TF32 tensor-core kernels.
#include <fno/fused.h>
#include <fno/layers.h>
#include <fno/precision.h>

#include <cuda_runtime.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/block_tail.h"
#include "cuda_timing.h"

namespace {

void ck(cudaError_t e, const char* what) { fno::bench::check("fused_block_tail_bench", e, what); }

double median_ms(int reps, const std::function<void()>& f) {
  return fno::bench::median_ms("fused_block_tail_bench", reps, f);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Micro-benchmark of the fused FNO block tail"};
  int64_t batch = 8, channels = 32, grid = 1024;
  int reps = 20;
  std::string dtypes = "float,bf16";
  double peak_gbps = 3350, peak_tflops = 67;
  bool unfused = true, sweep = false;
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--channels", channels, "hidden channels C (Cmid = C/2)")
      ->check(CLI::PositiveNumber);
  app.add_option("--grid", grid, "grid side: N = grid^2")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::PositiveNumber);
  app.add_option(
      "--dtypes", dtypes,
      "activation dtypes: float (FFMA forward, 3xTF32 backward), 3xtf32, tf32, bf16, half");
  app.add_option("--peak-gbps", peak_gbps, "the device's nominal HBM bandwidth (H100 SXM: 3350)");
  app.add_option("--peak-tflops", peak_tflops, "the device's nominal fp32 FFMA rate");
  app.add_flag("!--no-unfused", unfused, "skip the LibTorch path");
  app.add_flag("--sweep", sweep,
               "also time the tensor-core kernels under launch tunings (CTAs per SM, L2 prefetch)");
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "fused_block_tail_bench: no CUDA device\n");
    return 77;
  }
  const int64_t cm = channels / 2, n = grid * grid, numel = batch * channels * n;
  if (!fno::cuda::block_tail_supported(channels, cm)) {
    std::fprintf(stderr, "fused_block_tail_bench: no kernel for C=%ld\n", long(channels));
    return 2;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");

  // The measured copy ceiling: a device-to-device copy of 2 GiB, read + write.
  double copy_gbps = 0;
  {
    const int64_t bytes = int64_t{2} << 30;
    auto src = torch::empty({bytes}, torch::dtype(torch::kByte).device(torch::kCUDA)).fill_(1);
    auto dst = torch::empty_like(src);
    const double ms = median_ms(10, [&] {
      ck(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToDevice, 0),
         "copy");
    });
    copy_gbps = 2.0 * bytes / (ms * 1e6);
  }
  std::printf("device: %s, %d SMs; nominal HBM %.0f GB/s, measured d2d copy %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, peak_gbps, copy_gbps);
  std::printf("shape [%ld, %ld, %ld^2], Cmid %ld, gelu_input and gelu_mid on (a middle block)\n",
              long(batch), long(channels), long(grid), long(cm));
  std::printf("%-6s %-10s %-9s %9s %9s %7s %7s %9s\n", "dtype", "path", "pass", "ms", "GB/s",
              "%peak", "%copy", "TFLOP/s");

  const auto f32 = torch::TensorOptions().device(torch::kCUDA);
  const auto param = [&](std::vector<int64_t> shape, double bound) {
    return (torch::rand(shape, f32) * 2 - 1).mul_(bound);
  };
  const double bc = 1 / std::sqrt(double(channels)), bm = 1 / std::sqrt(double(cm));
  auto w_skip = param({channels, channels}, bc), w1 = param({cm, channels}, bc),
       b1 = param({cm}, bc), w2 = param({channels, cm}, bm), b2 = param({channels}, bm),
       gate = torch::rand({channels}, f32) + 0.5;
  const fno::cuda::BlockTailWeights w{w_skip.data_ptr<float>(), w1.data_ptr<float>(),
                                      b1.data_ptr<float>(),     w2.data_ptr<float>(),
                                      b2.data_ptr<float>(),     gate.data_ptr<float>()};
  auto gws = torch::empty_like(w_skip), gw1 = torch::empty_like(w1), gb1 = torch::empty_like(b1),
       gw2 = torch::empty_like(w2), gb2 = torch::empty_like(b2), ggate = torch::empty_like(gate);
  const fno::cuda::BlockTailGrads g{gws.data_ptr<float>(), gw1.data_ptr<float>(),
                                    gb1.data_ptr<float>(), gw2.data_ptr<float>(),
                                    gb2.data_ptr<float>(), ggate.data_ptr<float>()};
  auto workspace =
      torch::empty({fno::cuda::block_tail_backward_workspace(batch, channels, cm, n)}, f32);
  const double fwd_flops = 2.0 * (channels * channels + 2.0 * channels * cm) * batch * n;
  const double bwd_flops = 2.0 * (2 * channels * channels + 5.0 * channels * cm) * batch * n;

  const auto report = [&](const std::string& dt, const char* path, const char* pass, double ms,
                          double bytes, double flops) {
    const double gbps = bytes / (ms * 1e6);
    std::printf("%-6s %-10s %-9s %9.3f %9.0f %6.1f%% %6.1f%% %9.1f\n", dt.c_str(), path, pass, ms,
                gbps, 100 * gbps / peak_gbps, 100 * gbps / copy_gbps, flops / (ms * 1e9));
    std::fflush(stdout);
  };

  std::stringstream list(dtypes);
  for (std::string dt; std::getline(list, dt, ',');) {
    const auto st = dt == "bf16" ? torch::kBFloat16 : dt == "half" ? torch::kHalf : torch::kFloat;
    const bool tf32 = dt == "tf32";
    const fno::MatmulPrecisionGuard precision(tf32 ? fno::Precision::kTF32 : fno::Precision::kFP32);
    const auto fp32 = tf32             ? fno::cuda::Fp32Math::kTf32
                      : dt == "3xtf32" ? fno::cuda::Fp32Math::k3xTf32
                                       : fno::cuda::Fp32Math::kFfma;
    const auto kd = dt == "bf16"   ? fno::cuda::Dtype::kBFloat16
                    : dt == "half" ? fno::cuda::Dtype::kHalf
                                   : fno::cuda::Dtype::kFloat;
    const double elt = torch::elementSize(st);
    const auto o = f32.dtype(st);
    {
      auto x = torch::randn({batch, channels, n}, o), s = torch::randn_like(x);
      auto a = torch::gelu(x);
      auto z = torch::empty_like(x), y1 = torch::empty_like(x), dz = torch::randn_like(x);
      auto da = torch::empty_like(x), ds = torch::empty_like(x);
      // Forward reads a and s and writes z and y1; backward reads dz, x and y1
      // and writes da and ds (the weights and gradients are a few KiB).
      const double fwd = median_ms(reps, [&] {
        ck(static_cast<cudaError_t>(fno::cuda::block_tail_forward(
               kd, a.data_ptr(), s.data_ptr(), z.data_ptr(), y1.data_ptr(), batch, channels, cm, n,
               w, true, nullptr, fp32)),
           "forward");
      });
      report(dt, "fused", "forward", fwd, 4 * elt * numel, fwd_flops);
      const double bwd = median_ms(reps, [&] {
        ck(static_cast<cudaError_t>(fno::cuda::block_tail_backward(
               kd, dz.data_ptr(), x.data_ptr(), y1.data_ptr(), da.data_ptr(), ds.data_ptr(), batch,
               channels, cm, n, w, g, true, true, workspace.data_ptr<float>(), nullptr, fp32)),
           "backward");
      });
      report(dt, "fused", "backward", bwd, 5 * elt * numel, bwd_flops);
      // The tiled step's kernels: next reads a and s and writes the next block's
      // input; the recomputing backward reads g, a and s and writes da and ds.
      const double next = median_ms(reps, [&] {
        ck(static_cast<cudaError_t>(
               fno::cuda::block_tail_forward_next(kd, a.data_ptr(), s.data_ptr(), z.data_ptr(),
                                                  batch, channels, cm, n, w, true, nullptr, fp32)),
           "forward_next");
      });
      report(dt, "fused", "next", next, 3 * elt * numel, fwd_flops);
      const double rec = median_ms(reps, [&] {
        ck(static_cast<cudaError_t>(fno::cuda::block_tail_backward_recompute(
               kd, dz.data_ptr(), a.data_ptr(), s.data_ptr(), da.data_ptr(), ds.data_ptr(), batch,
               channels, cm, n, w, g, true, workspace.data_ptr<float>(), nullptr, fp32)),
           "backward_recompute");
      });
      report(dt, "fused", "recompute", rec, 5 * elt * numel, fwd_flops + bwd_flops);
      if (sweep && !(st == torch::kFloat && fp32 == fno::cuda::Fp32Math::kFfma)) {
        const auto base = fno::cuda::block_tail_tuning();
        for (const int l2 : {0, 64, 128, 256}) {
          for (const int ctas : {2, 3, 4, 5, 6}) {
            auto t = base;
            t.forward_ctas_per_sm = ctas;
            t.l2_prefetch = l2;
            fno::cuda::set_block_tail_tuning(t);
            const double ms = median_ms(reps, [&] {
              ck(static_cast<cudaError_t>(fno::cuda::block_tail_forward(
                     kd, a.data_ptr(), s.data_ptr(), z.data_ptr(), y1.data_ptr(), batch, channels,
                     cm, n, w, true, nullptr, fp32)),
                 "forward");
            });
            const std::string path = "f" + std::to_string(ctas) + "/l2:" + std::to_string(l2);
            report(dt, path.c_str(), "forward", ms, 4 * elt * numel, fwd_flops);
          }
          for (const int ctas : {-2, 1, 2}) {  // (-2: 2 CTAs, the unpacked bf16/half form)
            auto t = base;
            t.backward_ctas_per_sm = ctas < 0 ? -ctas : ctas;
            t.packed = ctas > 0;
            t.l2_prefetch = l2;
            fno::cuda::set_block_tail_tuning(t);
            const double ms = median_ms(reps, [&] {
              ck(static_cast<cudaError_t>(fno::cuda::block_tail_backward(
                     kd, dz.data_ptr(), x.data_ptr(), y1.data_ptr(), da.data_ptr(), ds.data_ptr(),
                     batch, channels, cm, n, w, g, true, true, workspace.data_ptr<float>(), nullptr,
                     fp32)),
                 "backward");
            });
            const std::string path = (ctas < 0 ? "u" : "b") +
                                     std::to_string(ctas < 0 ? -ctas : ctas) +
                                     "/l2:" + std::to_string(l2);
            report(dt, path.c_str(), "backward", ms, 5 * elt * numel, bwd_flops);
          }
        }
        fno::cuda::set_block_tail_tuning(base);
      }
    }
    if (!unfused) continue;
    // The LibTorch path (fp32 weights for float and tf32, TF32 GEMMs for tf32; for bf16 and half,
    // weights cast to the activations' dtype, as that path needs one dtype).
    {
      const fno::FusedKernelsGuard off(false);
      auto x = torch::randn({batch, channels, n}, o).requires_grad_();
      auto s = torch::randn_like(x).requires_grad_();
      auto dz = torch::randn_like(x);
      std::vector<torch::Tensor> ps;
      for (const auto& p : {w_skip, w1, b1, w2, b2, gate}) ps.push_back(p.to(st).requires_grad_());
      const auto gview = ps[5].view({1, -1, 1});
      torch::Tensor z;
      const auto forward = [&] {
        z = fno::block_tail(x, torch::gelu(x), s, ps[0], ps[1], ps[2], ps[3], ps[4], gview, true,
                            true);
      };
      const double fwd = median_ms(reps, forward);
      report(dt, "unfused", "forward", fwd, 4 * elt * numel, fwd_flops);
      // Backward alone: a forward before each timed run.
      std::vector<double> ms;
      for (int i = 0; i < reps + 2; ++i) {
        forward();
        torch::cuda::synchronize();
        ms.push_back(median_ms(1, [&] {
          torch::autograd::grad({z}, {x, s, ps[0], ps[1], ps[2], ps[3], ps[4], ps[5]}, {dz},
                                /*retain_graph=*/true);
        }));
      }
      std::sort(ms.begin(), ms.end());
      report(dt, "unfused", "backward", ms[ms.size() / 2], 5 * elt * numel, bwd_flops);
    }
  }
  return 0;
}
