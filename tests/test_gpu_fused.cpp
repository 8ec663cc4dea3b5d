// The fused CUDA block tail (libfno/src/cuda/block_tail_*.cu) against the
// LibTorch path (label "gpu"): fp32 on random inputs, every gelu_input /
// gelu_mid combination; fp32 on TF32 tensor cores (where TF32 is allowed) and
// bf16 and half activations (tensor cores) against the fp32 path on the same
// (rounded) inputs; a tensor of more than 2^31 elements; and the tiled step's
// two kernels (the next block's input, the recomputing backward) against the
// whole-grid kernels; a width without a fused tail (20) with its channel MLP
// on the fused channel-MLP kernels; those kernels on their own.
#include <fno/fused.h>
#include <fno/layers.h>
#include <fno/precision.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"
// (internal to libfno: the tiled step's entry points, called directly)
#include "../libfno/src/block_tail_fused.h"
#include "../libfno/src/channel_wgrad_fused.h"
#include "../libfno/src/dft_expand_fused.h"
#include "../libfno/src/gelu_fork_fused.h"

using fno::test::rel_err;

namespace {

struct TailParams {
  torch::Tensor w_skip, w1, b1, w2, b2, gate;
  std::vector<torch::Tensor> list() const { return {w_skip, w1, b1, w2, b2, gate}; }
};

// Parameters as the FNO holds them (fp32 masters): [C, C, 1], [Cmid, C, 1],
// [Cmid], [C, Cmid, 1], [C], [1, C, 1, 1].
TailParams random_params(int64_t c, int64_t cm) {
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const auto u = [&](std::vector<int64_t> shape, double bound) {
    return (torch::rand(shape, o) * 2 - 1).mul_(bound).requires_grad_();
  };
  const double bc = 1 / std::sqrt(double(c)), bm = 1 / std::sqrt(double(cm));
  return {u({c, c, 1}, bc), u({cm, c, 1}, bc),
          u({cm}, bc),      u({c, cm, 1}, bm),
          u({c}, bm),       (torch::rand({1, c, 1, 1}, o) + 0.5).requires_grad_()};
}

struct TailResult {
  torch::Tensor z;
  std::vector<torch::Tensor> grads;  // x, s, then the parameters
};

// z = block_tail(x, act(x), s, ...) and the gradients of sum(z * w) with
// respect to x, s and the parameters, with the fused kernels on or off.
TailResult run_tail(const torch::Tensor& x0, const torch::Tensor& s0, const TailParams& p,
                    const torch::Tensor& dz, bool gelu_input, bool gelu_mid, bool fused) {
  const fno::FusedKernelsGuard guard(fused);
  const auto x = x0.detach().requires_grad_();
  const auto s = s0.detach().requires_grad_();
  const auto a = gelu_input ? torch::gelu(x) : x;
  auto z = fno::block_tail(x, a, s, p.w_skip, p.w1, p.b1, p.w2, p.b2, p.gate, gelu_input, gelu_mid);
  std::vector<torch::Tensor> inputs{x, s};
  for (const auto& t : p.list()) inputs.push_back(t);
  auto grads = torch::autograd::grad({z}, inputs, {dz});
  return {z.detach(), grads};
}

const char* kGradNames[] = {"x", "s", "w_skip", "w1", "b1", "w2", "b2", "gate"};

}  // namespace

// Sets how fp32 runs the fused block tail while alive, then restores it.
struct Fp32BlockTailGuard {
  fno::Fp32BlockTail previous = fno::fp32_block_tail();
  explicit Fp32BlockTailGuard(fno::Fp32BlockTail mode) { fno::set_fp32_block_tail(mode); }
  ~Fp32BlockTailGuard() { fno::set_fp32_block_tail(previous); }
};

TEST_CASE("fused block tail: fp32 matches the LibTorch path (all GELU placements)") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  // FFMA forward + 3xTF32 backward (the default) and 3xTF32 throughout (opt-in).
  for (const auto mode : {fno::Fp32BlockTail::k3xTF32, fno::Fp32BlockTail::kFFMA}) {
    const Fp32BlockTailGuard fp32(mode);
    const std::string name = mode == fno::Fp32BlockTail::kFFMA ? "ffma" : "3xtf32";
    torch::manual_seed(14);
    // Odd grids (a partial last tile), and one long enough for every CTA to
    // loop over several tiles.
    for (const auto& shape :
         std::vector<std::vector<int64_t>>{{3, 32, 37, 29}, {1, 32, 1000}, {4, 32, 300, 301}}) {
      const int64_t c = shape[1], cm = c / 2;
      const auto p = random_params(c, cm);
      const auto x = torch::randn(shape, o), s = torch::randn(shape, o),
                 dz = torch::randn(shape, o);
      for (const bool gelu_input : {false, true}) {
        for (const bool gelu_mid : {false, true}) {
          INFO(name, ", shape ", torch::IntArrayRef(shape), ", gelu_input ", gelu_input,
               ", gelu_mid ", gelu_mid);
          const auto ref = run_tail(x, s, p, dz, gelu_input, gelu_mid, false);
          const auto got = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
          CHECK((got.z.scalar_type() == torch::kFloat));
          const double ez = rel_err(got.z, ref.z);
          MESSAGE("fp32 ", name, " ", torch::IntArrayRef(shape), " gelu_input ", gelu_input,
                  " gelu_mid ", gelu_mid, ": z ", ez);
          CHECK(ez <= 1e-5);
          for (size_t i = 0; i < ref.grads.size(); ++i) {
            // (the error is computed before INFO: rel_err's own REQUIRE must not
            // run inside doctest's lazy stringification of the context)
            const double e = rel_err(got.grads[i], ref.grads[i]);
            INFO("gradient of ", std::string(kGradNames[i]), ": ", e);
            MESSAGE(std::string("  grad "), std::string(kGradNames[i]), ": ", e);
            CHECK((got.grads[i].scalar_type() == torch::kFloat));
            CHECK((got.grads[i].sizes() == ref.grads[i].sizes()));
            CHECK(e <= 1e-4);
          }
          // Deterministic: the same inputs give bit-identical gradients.
          const auto again = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
          for (size_t i = 0; i < got.grads.size(); ++i)
            CHECK(torch::equal(again.grads[i], got.grads[i]));
        }
      }
    }
  }
}

TEST_CASE("fused block tail: bf16 and half activations against fp32 on the same inputs") {
  REQUIRE(fno::fused_kernels_compiled());
  torch::manual_seed(15);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const auto p = random_params(32, 16);
  // Tolerances (relative, norm-wise): the tensor-core kernels round the
  // weights and every per-point intermediate to the activation dtype (2^-9 for
  // bf16, 2^-12 for half, per element), as the LibTorch path in that dtype
  // does; the outputs z, da, ds are stored rounded, and y1 is stored rounded
  // where the fp32 reference keeps it exact.
  struct Case {
    torch::ScalarType dtype;
    double fwd, grad;
  };
  // Shapes: every tile partial (N odd: element-wise copies), whole 16-byte
  // tiles but a partial last one, and several tiles per warp.
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{2, 32, 61, 67}, {3, 32, 1000}, {2, 32, 256, 256}}) {
    for (const auto& c : {Case{torch::kBFloat16, 1e-2, 2e-2}, Case{torch::kHalf, 2e-3, 4e-3}}) {
      const auto round = [&](const torch::Tensor& t) { return t.to(c.dtype); };
      const auto x = round(torch::randn(shape, o)), s = round(torch::randn(shape, o)),
                 dz = round(torch::randn(shape, o));
      for (const bool gelu_input : {false, true}) {
        for (const bool gelu_mid : {false, true}) {
          INFO("shape ", torch::IntArrayRef(shape), ", dtype ", std::string(c10::toString(c.dtype)),
               ", gelu_input ", gelu_input, ", gelu_mid ", gelu_mid);
          const auto ref = run_tail(x.to(torch::kFloat), s.to(torch::kFloat), p,
                                    dz.to(torch::kFloat), gelu_input, gelu_mid, false);
          const auto got = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
          CHECK((got.z.scalar_type() == c.dtype));
          const double ez = rel_err(got.z.to(torch::kFloat), ref.z);
          MESSAGE(std::string(c10::toString(c.dtype)), " ", torch::IntArrayRef(shape),
                  " gelu_input ", gelu_input, " gelu_mid ", gelu_mid, ": z ", ez);
          CHECK(ez <= c.fwd);
          for (size_t i = 0; i < ref.grads.size(); ++i) {
            const double e = rel_err(got.grads[i].to(torch::kFloat), ref.grads[i]);
            INFO("gradient of ", std::string(kGradNames[i]), ": ", e);
            MESSAGE(std::string("  grad "), std::string(kGradNames[i]), " ",
                    std::string(c10::toString(got.grads[i].scalar_type())), ": ", e);
            // x and s follow the activations; the parameters' gradients stay fp32.
            CHECK((got.grads[i].scalar_type() == (i < 2 ? c.dtype : torch::kFloat)));
            CHECK(e <= c.grad);
          }
          // Deterministic: the same inputs give bit-identical outputs and gradients.
          const auto again = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
          CHECK(torch::equal(again.z, got.z));
          for (size_t i = 0; i < got.grads.size(); ++i)
            CHECK(torch::equal(again.grads[i], got.grads[i]));
          // The backward's packed form (default) and its unpacked form agree bit for bit.
          REQUIRE(fno::block_tail_packed());
          fno::set_block_tail_packed(false);
          const auto unpacked = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
          fno::set_block_tail_packed(true);
          for (size_t i = 0; i < got.grads.size(); ++i)
            CHECK(torch::equal(unpacked.grads[i], got.grads[i]));
        }
      }
    }
  }
}

TEST_CASE(
    "block tail of width 20 (no fused tail): its channel MLP fused, against the LibTorch path") {
  REQUIRE(fno::fused_kernels_compiled());
  torch::manual_seed(16);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  // The Navier-Stokes models' blocks (width 20, a channel MLP 10 wide); 64, the
  // one-pass backward's widest; 100, a fused forward with the LibTorch backward.
  for (const int64_t cm : {10, 64, 100}) {
    const auto p = random_params(20, cm);
    for (const auto& shape :
         std::vector<std::vector<int64_t>>{{2, 20, 37, 29}, {10, 20, 64, 64}, {3, 20, 9, 10, 11}}) {
      const auto x = torch::randn(shape, o), s = torch::randn(shape, o),
                 dz = torch::randn(shape, o);
      for (const bool gelu_input : {false, true}) {
        for (const bool gelu_mid : {false, true}) {
          const auto ref = run_tail(x, s, p, dz, gelu_input, gelu_mid, false);
          for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
            const auto round = [&](const torch::Tensor& t) { return t.to(dtype); };
            const auto xd = round(x), sd = round(s), dzd = round(dz);
            // The LibTorch path in the same dtype on the same rounded inputs:
            // the fused MLP must be as close to fp32 as it is.
            const auto lib = run_tail(xd, sd, p, dzd, gelu_input, gelu_mid, false);
            const auto got = run_tail(xd, sd, p, dzd, gelu_input, gelu_mid, true);
            const auto ref_d = dtype == torch::kFloat
                                   ? ref
                                   : run_tail(xd.to(torch::kFloat), sd.to(torch::kFloat), p,
                                              dzd.to(torch::kFloat), gelu_input, gelu_mid, false);
            const bool fp32 = dtype == torch::kFloat;
            const double ez = rel_err(got.z.to(torch::kFloat), ref_d.z);
            const double lz = rel_err(lib.z.to(torch::kFloat), ref_d.z);
            INFO("Cmid ", cm, ", shape ", torch::IntArrayRef(shape), ", ", dtype, ", gelu_input ",
                 gelu_input, ", gelu_mid ", gelu_mid, ": z ", ez, " (LibTorch ", lz, ")");
            MESSAGE("width 20, Cmid ", cm, " ", torch::IntArrayRef(shape), " ", dtype,
                    " gelu_input ", gelu_input, " gelu_mid ", gelu_mid, ": z ", ez, " (LibTorch ",
                    lz, ")");
            CHECK((got.z.scalar_type() == dtype));
            CHECK(ez <= std::max(fp32 ? 1e-5 : 0.0, 1.5 * lz + 1e-4));
            for (size_t i = 0; i < ref.grads.size(); ++i) {
              const double e = rel_err(got.grads[i].to(torch::kFloat), ref_d.grads[i]);
              const double l = rel_err(lib.grads[i].to(torch::kFloat), ref_d.grads[i]);
              INFO("gradient of ", std::string(kGradNames[i]), ": ", e, " (LibTorch ", l, ")");
              MESSAGE(std::string("  grad "), std::string(kGradNames[i]), ": ", e, " (LibTorch ", l,
                      ")");
              CHECK((got.grads[i].scalar_type() == lib.grads[i].scalar_type()));
              CHECK((got.grads[i].sizes() == ref.grads[i].sizes()));
              CHECK(e <= std::max(fp32 ? 1e-4 : 0.0, 1.5 * l + 1e-3));
            }
            // The weight gradients are summed in a fixed order: the same bits again.
            const auto again = run_tail(xd, sd, p, dzd, gelu_input, gelu_mid, true);
            CHECK(torch::equal(again.z, got.z));
            for (size_t i = 0; i < got.grads.size(); ++i)
              CHECK(torch::equal(again.grads[i], got.grads[i]));
          }
        }
      }
    }
  }
}

TEST_CASE("fused block tail: fp32 on TF32 tensor cores where TF32 is allowed") {
  REQUIRE(fno::fused_kernels_compiled());
  torch::manual_seed(17);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  // Tolerances (relative, norm-wise, against the fp32 LibTorch path with TF32
  // off): the products' operands are rounded to TF32 (10-bit mantissa,
  // 2^-11 per element, as cuBLAS's TF32 GEMMs), accumulation stays fp32.
  const double tol_fwd = 2e-3, tol_grad = 4e-3;
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{3, 32, 37, 29}, {1, 32, 1000}, {4, 32, 300, 301}}) {
    const auto p = random_params(32, 16);
    const auto x = torch::randn(shape, o), s = torch::randn(shape, o), dz = torch::randn(shape, o);
    for (const bool gelu_input : {false, true}) {
      for (const bool gelu_mid : {false, true}) {
        INFO("shape ", torch::IntArrayRef(shape), ", gelu_input ", gelu_input, ", gelu_mid ",
             gelu_mid);
        const auto ref = run_tail(x, s, p, dz, gelu_input, gelu_mid, false);
        TailResult got, again;
        {
          const fno::MatmulPrecisionGuard tf32(fno::Precision::kTF32);
          got = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
          again = run_tail(x, s, p, dz, gelu_input, gelu_mid, true);
        }
        CHECK((got.z.scalar_type() == torch::kFloat));
        const double ez = rel_err(got.z, ref.z);
        MESSAGE("tf32 ", torch::IntArrayRef(shape), " gelu_input ", gelu_input, " gelu_mid ",
                gelu_mid, ": z ", ez);
        CHECK(ez <= tol_fwd);
        // (TF32 really ran: exact fp32 products land within 1e-5)
        CHECK(ez > 1e-6);
        for (size_t i = 0; i < ref.grads.size(); ++i) {
          const double e = rel_err(got.grads[i], ref.grads[i]);
          INFO("gradient of ", std::string(kGradNames[i]), ": ", e);
          MESSAGE(std::string("  grad "), std::string(kGradNames[i]), ": ", e);
          CHECK((got.grads[i].scalar_type() == torch::kFloat));
          CHECK(e <= tol_grad);
        }
        CHECK(torch::equal(again.z, got.z));
        for (size_t i = 0; i < got.grads.size(); ++i)
          CHECK(torch::equal(again.grads[i], got.grads[i]));
      }
    }
  }
  // Outside the guard, TF32 is off again: exact fp32 products.
  CHECK_FALSE(at::globalContext().allowTF32CuBLAS());
}

TEST_CASE("fused block tail: 64-bit offsets (a bf16 tensor of more than 2^31 elements)") {
  REQUIRE(fno::fused_kernels_compiled());
  // B * C * N = 2^31 + 2 * 32 * 37: channel 31 of the last point of batch 1
  // lies past 2^31 elements. Four bf16 tensors of 4 GiB live at once in
  // forward, five in backward (about 30 GiB).
  const int64_t b = 2, c = 32, cm = 16, n = (int64_t{1} << 25) + 37, k = 2048;
  torch::manual_seed(16);
  const auto o = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto p = random_params(c, cm);
  const fno::FusedKernelsGuard fused(true);
  // Skipped where the device has too little memory.
  torch::Tensor a;
  try {
    a = torch::randn({b, c, n}, o).requires_grad_();
    torch::empty({int64_t{26} << 30}, o.dtype(torch::kByte));  // room for the rest
  } catch (const c10::OutOfMemoryError&) {
    MESSAGE("skipped: too little device memory");
    return;
  }
  auto s = torch::randn({b, c, n}, o).requires_grad_();
  auto z = fno::block_tail(a, a, s, p.w_skip, p.w1, p.b1, p.w2, p.b2, p.gate, false, true);
  // dz is zero but on the last k points: every gradient is theirs alone.
  auto dz = torch::zeros_like(z);
  const auto dz_tail = torch::randn({1, c, k}, o);
  dz.narrow(0, 1, 1).narrow(2, n - k, k).copy_(dz_tail);
  std::vector<torch::Tensor> inputs{a, s};
  for (const auto& t : p.list()) inputs.push_back(t);
  auto grads = torch::autograd::grad({z}, inputs, {dz});
  // The reference: the LibTorch path in fp32 on the first and last k points.
  const auto tail = [&](const torch::Tensor& t, int64_t i, int64_t from) {
    return t.detach().narrow(0, i, 1).narrow(2, from, k).to(torch::kFloat).contiguous();
  };
  for (const auto& where : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, n - k}}) {
    const int64_t i = where.first, from = where.second;
    INFO("batch entry ", i, ", points from ", from);
    const auto dz_ref =
        i == 1 ? dz_tail.to(torch::kFloat) : torch::zeros({1, c, k}, o.dtype(torch::kFloat));
    const auto ref = run_tail(tail(a, i, from), tail(s, i, from), p, dz_ref, false, true, false);
    CHECK(rel_err(tail(z, i, from), ref.z) <= 1e-2);
    if (i == 1) {
      CHECK(rel_err(tail(grads[0], i, from), ref.grads[0]) <= 2e-2);
      CHECK(rel_err(tail(grads[1], i, from), ref.grads[1]) <= 2e-2);
      for (size_t j = 2; j < ref.grads.size(); ++j) {
        INFO("gradient of ", std::string(kGradNames[j]));
        CHECK(rel_err(grads[j], ref.grads[j]) <= 2e-2);
      }
    }
  }
  // Where dz is zero, so are da and ds (each point written, none written twice).
  CHECK(grads[0].narrow(2, 0, n - k).abs().max().item<float>() == 0);
  CHECK(grads[1].narrow(0, 0, 1).abs().max().item<float>() == 0);
}

// ---- The tiled step's kernels (fno/tiled.h) --------------------------------
// fused_block_tail_next and fused_block_tail_backward_recompute against the
// whole-grid kernels they stand for: the next block's input against
// GELU(z) (gelu_mid) or z from fused_block_tail_forward, and the gradients
// from the output's gradient g against fused_block_tail_backward given y1
// and dz = GELU'(z) g (gelu_mid) or g.

namespace {

// The parameters as the fused entry points take them: w_skip [C, C],
// w1 [Cmid, C], b1 [Cmid], w2 [C, Cmid], b2 [C], gate [C].
struct FlatParams {
  torch::Tensor w_skip, w1, b1, w2, b2, gate;
};
FlatParams flat_params(const TailParams& p) {
  return {p.w_skip.detach().flatten(1),
          p.w1.detach().flatten(1),
          p.b1.detach(),
          p.w2.detach().flatten(1),
          p.b2.detach(),
          p.gate.detach().flatten()};
}

}  // namespace

TEST_CASE("fused block tail, tiled step: next-block input and recomputing backward") {
  REQUIRE(fno::fused_kernels_compiled());
  const torch::NoGradGuard no_grad;
  const fno::FusedKernelsGuard fused(true);
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  // Tolerances (relative, norm-wise) against the whole-grid kernels of the
  // same mode. Both run the same products but for the fp32 default's forward
  // (FFMA there, 3xTF32 in the recomputing backward: about an fp32 ulp); the
  // rest differs only where the kernels' GELU (Abramowitz & Stegun's erf,
  // |error| <= 1.5e-7) replaces torch's on the output (next) and in dz =
  // GELU'(z) g, and by the roundings to the activation dtype that this
  // flips now and then (rare: bf16/half and TF32 operands).
  struct Mode {
    std::string name;
    torch::ScalarType dtype;
    fno::Fp32BlockTail fp32;
    bool tf32;
    double next_tol, grad_tol;
  };
  const std::vector<Mode> modes{
      {"fp32 (ffma + 3xtf32)", torch::kFloat, fno::Fp32BlockTail::kFFMA, false, 2e-6, 1e-5},
      {"fp32 3xtf32", torch::kFloat, fno::Fp32BlockTail::k3xTF32, false, 2e-6, 1e-5},
      {"fp32 tf32", torch::kFloat, fno::Fp32BlockTail::kFFMA, true, 2e-6, 1e-4},
      {"bf16", torch::kBFloat16, fno::Fp32BlockTail::kFFMA, false, 1e-3, 2e-3},
      {"half", torch::kHalf, fno::Fp32BlockTail::kFFMA, false, 2e-4, 1e-3}};
  const char* names[] = {"da", "ds", "w_skip", "w1", "b1", "w2", "b2", "gate"};
  const auto list = [](const fno::detail::BlockTailGradients& g) {
    return std::vector<torch::Tensor>{g.da, g.ds, g.w_skip, g.w1, g.b1, g.w2, g.b2, g.gate};
  };
  // A partial last tile with element-wise copies (N odd), and over 2^20 points
  // on the vector copies with several tiles a warp, across batch entries.
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{2, 32, 4099}, {2, 32, (int64_t{1} << 19) + 8}}) {
    torch::manual_seed(18);
    const auto p = flat_params(random_params(32, 16));
    const auto a0 = torch::randn(shape, o), s0 = torch::randn(shape, o),
               g0 = torch::randn(shape, o);
    for (const auto& m : modes) {
      const Fp32BlockTailGuard fp32(m.fp32);
      const fno::MatmulPrecisionGuard matmul(m.tf32 ? fno::Precision::kTF32
                                                    : fno::Precision::kFP32);
      const auto a = a0.to(m.dtype), s = s0.to(m.dtype), g = g0.to(m.dtype);
      for (const bool gelu_mid : {false, true}) {
        INFO(m.name, ", shape ", torch::IntArrayRef(shape), ", gelu_mid ", gelu_mid);
        REQUIRE(
            fno::detail::fused_block_tail_usable(a, s, p.w_skip, p.w1, p.b1, p.w2, p.b2, p.gate));
        const auto [z, y1] = fno::detail::fused_block_tail_forward(a, s, p.w_skip, p.w1, p.b1, p.w2,
                                                                   p.b2, p.gate, gelu_mid);
        // (a) The next block's input.
        const auto out = fno::detail::fused_block_tail_next(a, s, p.w_skip, p.w1, p.b1, p.w2, p.b2,
                                                            p.gate, gelu_mid);
        CHECK((out.scalar_type() == m.dtype));
        const double en = rel_err(out, gelu_mid ? torch::gelu(z) : z);
        MESSAGE(m.name, " ", torch::IntArrayRef(shape), " gelu_mid ", gelu_mid, ": next ", en);
        CHECK(en <= m.next_tol);
        // Without the GELU, z itself: the same products, bit for bit.
        if (!gelu_mid) CHECK(torch::equal(out, z));
        // (b) The gradients, recomputing y1, the hidden layer and z.
        const auto dz = gelu_mid ? at::gelu_backward(g, z) : g;
        const auto ref = list(fno::detail::fused_block_tail_backward(
            dz, a, y1, p.w_skip, p.w1, p.b1, p.w2, p.b2, p.gate, false, gelu_mid));
        const auto got = list(fno::detail::fused_block_tail_backward_recompute(
            g, a, s, p.w_skip, p.w1, p.b1, p.w2, p.b2, p.gate, gelu_mid));
        bool identical = true;
        for (size_t i = 0; i < ref.size(); ++i) {
          const double e = rel_err(got[i], ref[i]);
          INFO("gradient of ", std::string(names[i]), ": ", e);
          MESSAGE(std::string("  grad "), std::string(names[i]), ": ", e);
          CHECK((got[i].scalar_type() == ref[i].scalar_type()));
          CHECK((got[i].sizes() == ref[i].sizes()));
          CHECK(e <= m.grad_tol);
          identical = identical && torch::equal(got[i], ref[i]);
        }
        // Where both run the same products and dz = g (no GELU: the tensor-core
        // modes), the recomputing kernel does backward_tc's arithmetic on the same
        // values: expected bit for bit (reported, not required).
        if (!gelu_mid &&
            !(m.dtype == torch::kFloat && m.fp32 == fno::Fp32BlockTail::kFFMA && !m.tf32))
          WARN_MESSAGE(identical, "not bit-identical to the whole-grid backward");
        // Deterministic: the same inputs give bit-identical gradients.
        const auto again = list(fno::detail::fused_block_tail_backward_recompute(
            g, a, s, p.w_skip, p.w1, p.b1, p.w2, p.b2, p.gate, gelu_mid));
        for (size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(again[i], got[i]));
      }
    }
  }
  CHECK_FALSE(at::globalContext().allowTF32CuBLAS());
}

namespace {

struct MlpResult {
  torch::Tensor y;
  std::vector<torch::Tensor> grads;  // x, w1, b1, w2, b2
};

// y = channel_mlp2(x) in x's dtype and the gradients of sum(y * dy), with the
// fused kernels on or off; the parameters are fp32 masters [Cout, Cin, 1] and [C].
MlpResult run_mlp(const torch::Tensor& x0, const std::vector<torch::Tensor>& p,
                  const torch::Tensor& dy, bool gelu_input, bool fused) {
  const fno::FusedKernelsGuard guard(fused);
  const auto x = x0.detach().requires_grad_();
  auto y = fno::channel_mlp2(x, p[0], p[1], p[2], p[3], gelu_input);
  std::vector<torch::Tensor> inputs{x};
  inputs.insert(inputs.end(), p.begin(), p.end());
  return {y.detach(), torch::autograd::grad({y}, inputs, {dy.to(y.scalar_type())})};
}

}  // namespace

TEST_CASE("fused channel MLP: the lifting and projection shapes against the LibTorch path") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  const char* names[] = {"x", "w1", "b1", "w2", "b2"};
  torch::manual_seed(26);
  // {B, Cin, Cmid, Cout, grid}: the 2D and 3D liftings, the projection,
  // hidden layers narrower than 64 and 128 (the one-pass backward's two
  // widths and their padding) and wider (its GEMM path), a width-20 block's
  // channel MLP (the one-pass backward up to 64 wide, the GEMM path past it)
  // and the projection from width 20, and a shape without a kernel (the
  // LibTorch path, said once); then the projection on a grid long enough for
  // the LibTorch backward's per-entry chunks (over 2^20 points; the
  // sanitizers skip it).
  std::vector<std::vector<int64_t>> shapes;
  SUBCASE("small grids") {
    shapes = {{3, 3, 64, 32, 37, 29},  {2, 4, 64, 32, 9, 10, 11}, {2, 3, 40, 32, 33, 17},
              {1, 32, 37, 1, 129},     {2, 32, 64, 1, 30, 41},    {2, 32, 128, 1, 50, 40},
              {2, 32, 100, 1, 31, 33}, {2, 4, 128, 32, 21, 23},   {2, 32, 200, 1, 30, 31},
              {2, 5, 16, 8, 20, 21}};
  }
  SUBCASE("small grids of width 20") {
    shapes = {{2, 20, 10, 20, 30, 31},
              {3, 20, 64, 20, 17, 19},
              {2, 20, 100, 20, 17, 19},
              {2, 20, 128, 1, 33, 17}};
  }
  SUBCASE("a long grid") { shapes = {{2, 32, 64, 1, 1100, 1000}, {1, 32, 128, 1, 1100, 1000}}; }
  for (const auto& sh : shapes) {
    const int64_t b = sh[0], cin = sh[1], cm = sh[2], cout = sh[3];
    std::vector<int64_t> shape{b, cin};
    shape.insert(shape.end(), sh.begin() + 4, sh.end());
    const auto u = [&](std::vector<int64_t> s, double bound) {
      return (torch::rand(s, o) * 2 - 1).mul_(bound).requires_grad_();
    };
    const std::vector<torch::Tensor> p{u({cm, cin, 1}, 1 / std::sqrt(double(cin))), u({cm}, 0.5),
                                       u({cout, cm, 1}, 1 / std::sqrt(double(cm))), u({cout}, 0.5)};
    auto yshape = shape;
    yshape[1] = cout;
    const auto x = torch::randn(shape, o), dy = torch::randn(yshape, o);
    for (const bool gelu_input : {false, true}) {
      const auto ref = run_mlp(x, p, dy, gelu_input, false);
      for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
        const auto xd = x.to(dtype);
        // The LibTorch path on the same rounded input in the same dtype: the
        // fused kernel must be as close to fp32 as it is.
        const auto lib = run_mlp(xd, p, dy, gelu_input, false);
        const auto got = run_mlp(xd, p, dy, gelu_input, true);
        const auto ref_d =
            dtype == torch::kFloat ? ref : run_mlp(xd.to(torch::kFloat), p, dy, gelu_input, false);
        const double tol = dtype == torch::kFloat ? 1e-5 : 0.0;
        const double ey = rel_err(got.y.to(torch::kFloat), ref_d.y);
        const double ly = rel_err(lib.y.to(torch::kFloat), ref_d.y);
        INFO("shape ", torch::IntArrayRef(shape), " Cmid ", cm, " Cout ", cout, " gelu_input ",
             gelu_input, " ", dtype, ": y ", ey, " (LibTorch ", ly, ")");
        MESSAGE("channel MLP ", torch::IntArrayRef(shape), " -> ", cm, " -> ", cout, " gelu_input ",
                gelu_input, " ", dtype, ": y ", ey, " (LibTorch ", ly, ")");
        CHECK((got.y.scalar_type() == dtype));
        CHECK(ey <= std::max(tol, 1.5 * ly + 1e-4));
        for (size_t i = 0; i < ref.grads.size(); ++i) {
          const double e = rel_err(got.grads[i].to(torch::kFloat), ref_d.grads[i]);
          const double l = rel_err(lib.grads[i].to(torch::kFloat), ref_d.grads[i]);
          INFO("gradient of ", std::string(names[i]), ": ", e, " (LibTorch ", l, ")");
          MESSAGE(std::string("  grad "), std::string(names[i]), ": ", e, " (LibTorch ", l, ")");
          CHECK((got.grads[i].sizes() == ref.grads[i].sizes()));
          CHECK(e <= std::max(dtype == torch::kFloat ? 1e-4 : 0.0, 1.5 * l + 1e-3));
        }
        // The weight gradients are summed in a fixed order: a second run
        // gives the same bits.
        const auto again = run_mlp(xd, p, dy, gelu_input, true);
        for (size_t i = 0; i < ref.grads.size(); ++i)
          CHECK(torch::equal(again.grads[i], got.grads[i]));
      }
    }
  }
}

TEST_CASE("channel weight-gradient kernel: sums over batch and grid, strided operands, in order") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(27);
  // {B, Cout, Cin, N}: the Navier-Stokes FNO-3D's width-20 block layers over a
  // 64 x 64 x 16 space-time grid, its projection's first layer (128 <- 20) and
  // its lifting (20 <- 13) at 64 x 64 x 10; small: a projection's second layer
  // (1 <- 128), odd sizes, an empty grid.
  std::vector<std::array<int64_t, 4>> shapes;
  SUBCASE("the Navier-Stokes models' shapes") {
    shapes = {{10, 20, 20, 65536}, {3, 128, 20, 40960}, {1, 20, 13, 40960}};
  }
  SUBCASE("small shapes") { shapes = {{2, 1, 128, 4099}, {5, 7, 3, 33}, {2, 4, 4, 0}}; }
  for (const auto& [b, co, ci, n] : shapes) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      for (const bool sliced : {false, true}) {
        INFO("B ", b, " Cout ", co, " Cin ", ci, " N ", n, " ", dtype, " sliced ", sliced);
        // sliced: views into wider tensors (channel stride N + 7, an offset of 3)
        const int64_t wide = sliced ? n + 7 : n;
        const auto gy = torch::randn({b, co, wide}, o).to(dtype).narrow(2, sliced ? 3 : 0, n);
        const auto h = torch::randn({b, ci, wide}, o).to(dtype).narrow(2, sliced ? 3 : 0, n);
        auto gw = torch::randn({co, ci}, o);
        const auto start = gw.clone();
        REQUIRE(fno::detail::fused_channel_wgrad_usable(gw, gy, h));
        fno::detail::fused_channel_wgrad_add(gw, gy, h);
        const auto ref =
            start.to(torch::kDouble) +
            torch::einsum("bon,bin->oi", {gy.to(torch::kDouble), h.to(torch::kDouble)});
        const double e = rel_err(gw.to(torch::kDouble), ref);
        CHECK(e <= 1e-5);
        auto again = start.clone();
        fno::detail::fused_channel_wgrad_add(again, gy, h);
        CHECK(torch::equal(again, gw));
      }
    }
  }
  // Outside the kernel's limits, or with the fused kernels off: the LibTorch path.
  const auto gy = torch::randn({2, 200, 64}, o), h = torch::randn({2, 20, 64}, o);
  CHECK_FALSE(fno::detail::fused_channel_wgrad_usable(torch::zeros({200, 20}, o), gy, h));
  const auto g20 = torch::randn({2, 20, 64}, o);
  CHECK(fno::detail::fused_channel_wgrad_usable(torch::zeros({20, 20}, o), g20, h));
  CHECK_FALSE(fno::detail::fused_channel_wgrad_usable(torch::zeros({20, 20}, o).to(torch::kDouble),
                                                      g20, h));
  const fno::FusedKernelsGuard off(false);
  CHECK_FALSE(fno::detail::fused_channel_wgrad_usable(torch::zeros({20, 20}, o), g20, h));
}

TEST_CASE("GELU fork kernel: GELU'(x) (g1 + g2) as autograd's add and GeluBackward, in one pass") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(28);
  // {B, C, N}: whole 16-byte groups (the vector path), an odd count and an
  // offset view (one element at a time), empty.
  for (const auto& [b, c, n] :
       std::vector<std::array<int64_t, 3>>{{4, 32, 1024}, {3, 5, 7}, {2, 32, 4099}, {1, 1, 0}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      for (const bool offset : {false, true}) {
        INFO("B ", b, " C ", c, " N ", n, " ", dtype, " offset ", offset);
        const auto make = [&] {
          const auto t = (3 * torch::randn({b * c * n + 1}, o)).to(dtype);
          return t.narrow(0, offset ? 1 : 0, b * c * n).view({b, c, n});
        };
        const auto x = make(), g1 = make(), g2 = make();
        REQUIRE(fno::detail::fused_gelu_backward_sum_usable(x, g1, g2));
        const auto got = fno::detail::fused_gelu_backward_sum(x, g1, g2);
        const auto ref = at::gelu_backward(g1 + g2, x);
        const double eps = dtype == torch::kFloat ? 1e-6 : dtype == torch::kHalf ? 1e-3 : 8e-3;
        CHECK(torch::allclose(got.to(torch::kFloat), ref.to(torch::kFloat), eps, 1e-30));
        MESSAGE("equal bits: ", torch::equal(got, ref));
      }
    }
  }
  // Mismatched operands, or the fused kernels off: autograd's ops.
  const auto x = torch::randn({2, 8}, o);
  CHECK_FALSE(fno::detail::fused_gelu_backward_sum_usable(x, x, x.to(torch::kHalf)));
  CHECK_FALSE(fno::detail::fused_gelu_backward_sum_usable(x, x, torch::randn({2, 9}, o)));
  CHECK_FALSE(fno::detail::fused_gelu_backward_sum_usable(
      x.to(torch::kDouble), x.to(torch::kDouble), x.to(torch::kDouble)));
  const fno::FusedKernelsGuard off(false);
  CHECK_FALSE(fno::detail::fused_gelu_backward_sum_usable(x, x, x));
}

TEST_CASE("DFT expand kernel: x @ mat for the kept modes' few rows, against an fp64 product") {
  REQUIRE(fno::fused_kernels_compiled());
  const auto o = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(29);
  // {rows, N2, S}: the seed model at 128^2, the paper's 12 modes, a 3D time
  // axis, the widest N2 on a grid not a power of two, a few rows, none.
  for (const auto& [m, n2, s] : std::vector<std::array<int64_t, 3>>{{131072, 18, 128},
                                                                    {333, 24, 64},
                                                                    {77, 16, 256},
                                                                    {50, 32, 100},
                                                                    {5, 18, 4},
                                                                    {0, 18, 8}}) {
    INFO("rows ", m, " N2 ", n2, " S ", s);
    const auto x = torch::randn({m, n2}, o), mat = torch::randn({n2, s}, o);
    REQUIRE(fno::detail::dft_expand_usable(x, mat));
    const auto got = fno::detail::dft_expand(x, mat);
    REQUIRE(got.sizes() == torch::IntArrayRef({m, s}));
    if (m == 0) continue;
    const auto ref = torch::matmul(x.to(torch::kDouble), mat.to(torch::kDouble));
    CHECK(rel_err(got.to(torch::kDouble), ref) < 1e-6);
  }
  // Leading dims and a non-contiguous input are the same product.
  const auto x = torch::randn({2, 3, 18, 40}, o).transpose(2, 3), mat = torch::randn({18, 64}, o);
  REQUIRE(fno::detail::dft_expand_usable(x, mat));
  CHECK(rel_err(fno::detail::dft_expand(x, mat), torch::matmul(x, mat)) < 1e-6);
  // No kernel: an N2 not compiled, S not a multiple of 4, bf16, a transposed
  // matrix, or the fused kernels off.
  CHECK_FALSE(fno::detail::dft_expand_usable(torch::randn({4, 20}, o), torch::randn({20, 64}, o)));
  CHECK_FALSE(fno::detail::dft_expand_usable(torch::randn({4, 18}, o), torch::randn({18, 86}, o)));
  CHECK_FALSE(fno::detail::dft_expand_usable(torch::randn({4, 18}, o).to(torch::kBFloat16),
                                             torch::randn({18, 64}, o).to(torch::kBFloat16)));
  CHECK_FALSE(
      fno::detail::dft_expand_usable(torch::randn({4, 18}, o), torch::randn({64, 18}, o).t()));
  const fno::FusedKernelsGuard off(false);
  CHECK_FALSE(fno::detail::dft_expand_usable(torch::randn({4, 18}, o), torch::randn({18, 64}, o)));
}

TEST_CASE("SpectralConv on CUDA, fp32: the DFT kernels' forward and gradients against cuBLAS's") {
  REQUIRE(fno::fused_kernels_compiled());
  torch::manual_seed(30);
  // 2D at 128^2 (16 modes: 9 kept of the last dim, N2 18) and 3D with a time
  // axis of 16 (n_modes 14 there: 8 kept, N2 16).
  for (const auto& [modes, grid] :
       std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{16, 16}, {128, 128}}, {{16, 16, 14}, {32, 32, 16}}}) {
    fno::SpectralConv conv(fno::SpectralConvOptions(8, 8, modes));
    conv->to(torch::kCUDA);
    auto shape = std::vector<int64_t>{4, 8};
    shape.insert(shape.end(), grid.begin(), grid.end());
    const auto x = torch::randn(shape, torch::TensorOptions().device(torch::kCUDA));
    const auto g = torch::randn_like(x);
    const auto run = [&](bool fused) {
      const fno::FusedKernelsGuard guard(fused);
      const auto xi = x.clone().requires_grad_();
      for (auto& p : conv->parameters()) p.mutable_grad() = torch::Tensor();
      const auto y = conv->forward(xi);
      y.backward(g);
      return std::make_tuple(y.detach(), xi.grad(), conv->parameters()[0].grad().clone());
    };
    const auto [y0, dx0, dw0] = run(false);
    const auto [y1, dx1, dw1] = run(true);
    INFO("n_modes ", torch::IntArrayRef(modes));
    CHECK(rel_err(y1, y0) < 1e-5);
    CHECK(rel_err(dx1, dx0) < 1e-5);
    CHECK(rel_err(dw1, dw0) < 1e-5);
  }
}
