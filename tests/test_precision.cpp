// Mixed precision on the CPU: the FNO in bf16 and fp16 against fp32 (forward
// and every gradient, complex ones included, both memory levels, even and odd
// grids), the master weights and gradients staying fp32, and the loss
// scaler's skip and grow/back-off arithmetic. The GPU side is in test_gpu.cpp.
#include <fno/fno.h>
#include <fno/layers.h>
#include <fno/precision.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"

using fno::test::rel_err;

namespace {

// Relative errors of one step in a reduced precision against fp32, measured on
// this CPU (seed-like model, width 16, 3 blocks, 32^2 and 21^2): bf16 forward
// 4.1e-3, worst gradient 9.5e-3; fp16 forward 5.0e-4, worst gradient 7.9e-4.
// The bounds leave a margin of 3-5x; they are the tolerances documented for
// training.precision in configs/README.md.
struct Tolerance {
  double forward, grad;
};
Tolerance tolerance(c10::ScalarType t) {
  return t == torch::kBFloat16 ? Tolerance{2e-2, 3e-2} : Tolerance{2.5e-3, 4e-3};
}

fno::FNOOptions small_model() {
  return fno::FNOOptions({8, 8}, 1, 1, 16).n_layers(3).projection_channel_ratio(2.0);
}

struct StepResult {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
};

StepResult step(fno::FNO& model, const torch::Tensor& x, const torch::Tensor& y, bool slim) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  std::optional<fno::RecomputeCheapGuard> guard;
  if (slim) guard.emplace();
  auto out = model->forward(x);
  // Every output entry gets its own gradient, of one sign (y > 0 weights):
  // no sum of cancelling terms hides or inflates a rounding error.
  ((out - 0.5).pow(2) * y).sum().backward();
  StepResult r{out.detach(), {}};
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

}  // namespace

TEST_CASE("precision names parse; an unknown one is named in the error") {
  CHECK(fno::parse_precision("fp32") == fno::Precision::kFP32);
  CHECK(fno::parse_precision("tf32") == fno::Precision::kTF32);
  CHECK(fno::parse_precision("bf16") == fno::Precision::kBF16);
  CHECK(fno::parse_precision("fp16") == fno::Precision::kFP16);
  CHECK((fno::compute_dtype(fno::Precision::kTF32) == torch::kFloat));
  CHECK((fno::compute_dtype(fno::Precision::kBF16) == torch::kBFloat16));
  CHECK((fno::compute_dtype(fno::Precision::kFP16) == torch::kHalf));
  CHECK(fno::needs_loss_scaling(fno::Precision::kFP16));
  CHECK_FALSE(fno::needs_loss_scaling(fno::Precision::kBF16));
  CHECK_THROWS_WITH(
      fno::parse_precision("fp8"),
      doctest::Contains("unknown precision 'fp8' (expected fp32, tf32, bf16 or fp16)"));
  for (auto p : {fno::Precision::kFP32, fno::Precision::kTF32, fno::Precision::kBF16,
                 fno::Precision::kFP16}) {
    CHECK(fno::parse_precision(fno::to_string(p)) == p);
  }
}

TEST_CASE(
    "bf16 and fp16 steps follow fp32: outputs, every gradient, both memory levels, odd grids") {
  for (const int64_t n : {32, 21}) {
    for (const bool slim : {false, true}) {
      for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
        CAPTURE(n);
        CAPTURE(slim);
        CAPTURE(dtype);
        torch::manual_seed(3);
        auto model = fno::FNO(small_model());
        const auto x = torch::randn({2, 1, n, n});
        const auto y = torch::rand({2, 1, n, n});
        const auto ref = step(model, x, y, slim);
        model->options.compute_dtype(dtype);
        const auto got = step(model, x, y, slim);
        model->options.compute_dtype(torch::kFloat);

        // The output comes back in fp32; master weights and gradients stay fp32 / complex64.
        CHECK((got.out.scalar_type() == torch::kFloat));
        const double e_out = rel_err(got.out, ref.out);
        CHECK(e_out < tolerance(dtype).forward);
        CHECK(e_out > 0);  // it did run in the reduced type
        const auto params = model->named_parameters();
        double e_grad = 0;
        std::string worst;
        for (size_t i = 0; i < params.size(); ++i) {
          CAPTURE(params[i].key());
          CHECK((params[i].value().scalar_type() == ref.grads[i].scalar_type()));
          CHECK((got.grads[i].scalar_type() == params[i].value().scalar_type()));
          const double e = rel_err(got.grads[i], ref.grads[i]);
          if (e > e_grad) e_grad = e, worst = params[i].key();
        }
        MESSAGE("grid ", n, ", slim ", slim, ", ", dtype, ": output ", e_out, ", worst gradient ",
                e_grad, " (", worst, ")");
        CHECK(e_grad < tolerance(dtype).grad);
      }
    }
  }
}

TEST_CASE("GradScaler: a planted inf skips the step and backs off; finite steps grow the scale") {
  auto w = torch::zeros({3}, torch::requires_grad());
  auto c =
      torch::zeros({2}, torch::TensorOptions().dtype(torch::kComplexFloat).requires_grad(true));
  fno::GradScaler scaler(fno::GradScalerOptions().init_scale(1024.0).growth_interval(3));
  CHECK(scaler.scale_value() == 1024.0);
  const std::vector<torch::Tensor> params{w, c};

  // scale(loss) multiplies by the scale.
  CHECK(scaler.scale(torch::tensor(2.0f)).item<float>() == 2048.0f);

  auto set_grads = [&](float re, float im) {
    w.mutable_grad() = torch::full({3}, 1024.0f * re);
    c.mutable_grad() =
        torch::complex(torch::full({2}, 1024.0f * re), torch::full({2}, 1024.0f * im));
  };
  // Finite: unscaled in place, both parts of the complex gradient.
  set_grads(2.0f, -4.0f);
  CHECK(scaler.unscale(params));
  CHECK(torch::allclose(w.grad(), torch::full({3}, 2.0f)));
  CHECK(torch::allclose(torch::real(c.grad()), torch::full({2}, 2.0f)));
  CHECK(torch::allclose(torch::imag(c.grad()), torch::full({2}, -4.0f)));
  scaler.update();
  CHECK(scaler.scale_value() == 1024.0);

  // An inf in the imaginary part alone is found: the step is skipped and the scale halves.
  set_grads(1.0f, 1.0f);
  c.mutable_grad().select(0, 1).copy_(
      torch::complex(torch::tensor(1.0f), torch::tensor(std::numeric_limits<float>::infinity())));
  CHECK_FALSE(scaler.unscale(params));
  scaler.update();
  CHECK(scaler.scale_value() == 512.0);
  CHECK(scaler.skipped_steps() == 1);
  // A NaN in a real gradient too.
  set_grads(1.0f, 1.0f);
  w.mutable_grad()[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(scaler.unscale(params));
  scaler.update();
  CHECK(scaler.scale_value() == 256.0);
  CHECK(scaler.skipped_steps() == 2);

  // growth_interval (3) finite steps in a row double it.
  for (int i = 0; i < 3; ++i) {
    set_grads(1.0f, 1.0f);
    CHECK(scaler.unscale(params));
    scaler.update();
    CHECK(scaler.scale_value() == (i < 2 ? 256.0 : 512.0));
  }

  // The state round-trips (what a checkpoint keeps).
  fno::GradScaler other;
  other.load_state(scaler.state());
  CHECK(other.scale_value() == 512.0);
  CHECK(other.skipped_steps() == 2);
  CHECK_THROWS_WITH(other.load_state({{"scale", torch::tensor(-1.0f)}}),
                    doctest::Contains("saved scale must be one positive number"));
  CHECK_THROWS_WITH(fno::GradScaler(fno::GradScalerOptions().backoff_factor(1.5)),
                    doctest::Contains("backoff_factor must be in (0, 1), got 1.5"));
}

TEST_CASE("in bf16 and fp16 the spectral conv's FFT path (many kept modes) follows fp32") {
  // More than 48 kept modes on the last dim take cuFFT/pocketfft, not the DFT
  // GEMMs; that path computes in fp32 and returns the compute type.
  torch::manual_seed(2);
  fno::SpectralConv conv(fno::SpectralConvOptions(4, 4, {6, 120}));
  const auto x = torch::randn({2, 4, 10, 141}, torch::requires_grad());
  const auto ref = conv->forward(x);
  const auto g = torch::randn_like(ref);
  const auto ref_grad = torch::autograd::grad({ref}, {x}, {g})[0];
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    CAPTURE(dtype);
    const auto xr = x.detach().to(dtype).requires_grad_(true);
    const auto y = conv->forward(xr);
    CHECK((y.scalar_type() == dtype));
    const auto gx = torch::autograd::grad({y}, {xr}, {g.to(dtype)})[0];
    CHECK(rel_err(y.to(torch::kFloat), ref) < tolerance(dtype).forward);
    CHECK(rel_err(gx.to(torch::kFloat), ref_grad) < tolerance(dtype).grad);
  }
}
