// Navier-Stokes data generation (fno_data/navier_stokes_gen.h, fno_datagen
// --problem ns): exact solutions (fields whose advection vanishes decay as
// exp(-nu 4 pi^2 |k|^2 t)), first-order convergence in dt and spectral
// convergence in the resolution of a nonlinear flow, the step against the
// scheme's plain arithmetic (version 1's step), float32 against float64, the
// initial field's variance against the paper's covariance, blow-up (the exact
// step, both precisions), the automatic batch, and the files: records at
// (r + 1) record_every, subsampling, determinism whatever the batch, initial
// files, option errors; the records as training pairs (space-time and
// recurrent).
#include <fno_data/darcy.h>
#include <fno_data/navier_stokes.h>
#include <fno_data/navier_stokes_gen.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "golden.h"

using fno::data::NavierStokesGenOptions;
using fno::test::out_path;
using fno::test::read_bytes;

namespace {

constexpr double kPi = 3.14159265358979323846;

// The grid x_i = i / R as [R, 1] and [1, R] (float64).
std::pair<torch::Tensor, torch::Tensor> grid(int64_t r) {
  const auto t = torch::arange(r, torch::kDouble) / static_cast<double>(r);
  return {t.view({-1, 1}), t.view({1, -1})};
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

// A smooth nonlinear flow: a few low modes, no single |k|.
torch::Tensor smooth_field(int64_t r) {
  const auto [x, y] = grid(r);
  return torch::cos(2 * kPi * x) * torch::cos(2 * kPi * y) + 0.5 * torch::sin(4 * kPi * x) +
         0.3 * torch::cos(2 * kPi * (x + 2 * y)) + 0.2 * torch::sin(2 * kPi * (3 * y - x));
}

// The scheme in its plain arithmetic, one transform per field and the update
// as ns_2d.py writes it: what ns_solve's step of few passes must reproduce to
// round-off. Records [B, R, R, records], float64.
torch::Tensor reference_solve(const torch::Tensor& w0, const torch::Tensor& f, double nu, double dt,
                              int64_t steps_per_record, int64_t records) {
  const int64_t r = w0.size(1);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const auto kx = torch::fft::fftfreq(r, 1.0 / r, f64).view({-1, 1});
  const auto ky = torch::fft::rfftfreq(r, 1.0 / r, f64).view({1, -1});
  const auto no_nyquist = [&](const torch::Tensor& k) {
    return torch::where(k.abs() >= r / 2.0, torch::zeros_like(k), k);
  };
  const auto i2pi = c10::complex<double>(0.0, 2.0 * kPi);
  const auto ikx = no_nyquist(kx).expand({r, r / 2 + 1}).to(torch::kComplexDouble) * i2pi;
  const auto iky = no_nyquist(ky).expand({r, r / 2 + 1}).to(torch::kComplexDouble) * i2pi;
  const auto lap = (4.0 * kPi * kPi) * (kx.square() + ky.square());
  auto inv_lap = lap.reciprocal();
  inv_lap.index_put_({0, 0}, 0.0);
  const double cut = 2.0 / 3.0 * (r / 2.0);
  const auto dealias = ((kx.abs() <= cut) & (ky.abs() <= cut)).to(torch::kDouble);
  const auto half = 0.5 * dt * nu * lap;
  const auto f_hat = f.defined() ? torch::fft::rfft2(f.to(torch::kDouble)) : torch::Tensor();
  auto w_h = torch::fft::rfft2(w0.to(torch::kDouble));
  auto out = torch::empty({w0.size(0), r, r, records}, f64);
  for (int64_t rec = 0; rec < records; ++rec) {
    for (int64_t s = 0; s < steps_per_record; ++s) {
      const auto u = torch::fft::irfft2(w_h * iky * inv_lap, torch::IntArrayRef{r, r});
      const auto v = torch::fft::irfft2(-w_h * ikx * inv_lap, torch::IntArrayRef{r, r});
      const auto wx = torch::fft::irfft2(w_h * ikx, torch::IntArrayRef{r, r});
      const auto wy = torch::fft::irfft2(w_h * iky, torch::IntArrayRef{r, r});
      const auto adv_h = torch::fft::rfft2(u * wx + v * wy) * dealias;
      auto rhs = (1.0 - half) * w_h - dt * adv_h;
      if (f_hat.defined()) rhs = rhs + dt * f_hat;
      w_h = rhs / (1.0 + half);
    }
    out.select(3, rec).copy_(torch::fft::irfft2(w_h, torch::IntArrayRef{r, r}));
  }
  return out;
}

// A file's text attribute ("" when absent).
std::string text_attribute(const std::string& path, const std::string& name) {
  for (const auto& a : fno::data::read_hdf5_attributes(path)) {
    if (a.name == name && !a.is_number) return a.text;
  }
  return "";
}

// The step at which ns_solve reports a blow-up (0: none).
int64_t blow_up_step(const torch::Tensor& w0, double dt, int64_t steps_per_record, int64_t records,
                     torch::Dtype precision) {
  try {
    fno::data::ns_solve(w0, torch::Tensor(), 1e-5, dt, steps_per_record, records,
                        fno::data::NsSolveOptions().precision(precision));
  } catch (const fno::data::NsBlowUp& e) {
    return e.step();
  }
  return 0;
}

/// out_path(name) with no file there (nor its _train/_test split): the
/// generators write over no file, and the test folder outlives a run.
std::string new_out(const std::string& name) {
  const std::string path = out_path(name), stem = path.substr(0, path.size() - 3);
  for (const auto& p : {path, stem + "_train.h5", stem + "_test.h5"}) std::filesystem::remove(p);
  return path;
}

NavierStokesGenOptions small(const std::string& out) {
  return NavierStokesGenOptions()
      .resolution(16)
      .samples(3)
      .seed(5)
      .viscosity(1e-2)
      .dt(1e-2)
      .t_final(0.3)
      .record_every(0.1)
      .device("cpu")
      .out(out);
}

void refused(const NavierStokesGenOptions& o, const std::string& text) {
  INFO(text);
  CHECK_THROWS_WITH_AS(fno::data::validate_navier_stokes_options(o), doctest::Contains(text.c_str()),
                       c10::ValueError);
}

}  // namespace

TEST_CASE("Navier-Stokes: fields without advection decay exactly as exp(-nu 4 pi^2 |k|^2 t)") {
  const int64_t r = 32;
  const auto [x, y] = grid(r);
  const double nu = 1e-2, dt = 1e-3;
  // cos 2pi x cos 2pi y (|k|^2 = 2) and two modes of |k|^2 = 5: psi is w / (4 pi^2 |k|^2),
  // so u . grad(w) = 0.
  const std::vector<std::pair<torch::Tensor, double>> cases{
      {torch::cos(2 * kPi * x) * torch::cos(2 * kPi * y), 2.0},
      {torch::cos(2 * kPi * (x + 2 * y)) + torch::sin(2 * kPi * (2 * x - y)), 5.0}};
  for (const auto& [w0, k_sq] : cases) {
    const auto w = fno::data::ns_solve(w0.unsqueeze(0), torch::Tensor(), nu, dt, 100, 5);
    REQUIRE(w.sizes() == torch::IntArrayRef({1, r, r, 5}));
    // Crank-Nicolson's factor per step, (1 - x/2) / (1 + x/2) with x = dt nu 4 pi^2 |k|^2:
    // the scheme's own solution to rounding, and exp(-x) per step to its O(x^3) error.
    const double x_step = dt * nu * 4 * kPi * kPi * k_sq;
    const double cn = (1 - x_step / 2) / (1 + x_step / 2);
    for (int64_t rec = 0; rec < 5; ++rec) {
      const int64_t steps = (rec + 1) * 100;
      const double t = static_cast<double>(steps) * dt;
      INFO("|k|^2 = " << k_sq << ", t = " << t);
      CHECK(rel(w[0].select(2, rec), w0 * std::pow(cn, static_cast<double>(steps))) < 1e-12);
      const auto exact = w0 * std::exp(-nu * 4 * kPi * kPi * k_sq * t);
      CHECK(rel(w[0].select(2, rec), exact) <
            static_cast<double>(steps) * std::pow(x_step, 3) / 12 * 1.01 + 1e-12);
    }
  }
}

TEST_CASE("Navier-Stokes: first order in dt, spectral in the resolution (a nonlinear flow)") {
  const double nu = 1e-3;
  // dt: the scheme is explicit Euler in the advection, so the error halves with dt.
  const auto w0 = fno::data::ns_initial_vorticity(3, 0, 32).unsqueeze(0);
  const auto f = fno::data::ns_paper_forcing(32, torch::TensorOptions());
  const auto at = [&](double dt) {
    const auto steps = static_cast<int64_t>(std::llround(0.5 / dt));
    return fno::data::ns_solve(w0, f, nu, dt, steps, 1).select(3, 0);
  };
  const auto reference = at(1.25e-4);
  const double e1 = rel(at(4e-3), reference), e2 = rel(at(2e-3), reference),
               e3 = rel(at(1e-3), reference);
  MESSAGE("dt 4e-3, 2e-3, 1e-3: errors " << e1 << ", " << e2 << ", " << e3);
  CHECK(e1 > 0);
  CHECK(e1 / e2 > 1.6);
  CHECK(e1 / e2 < 2.6);
  CHECK(e2 / e3 > 1.6);
  CHECK(e2 / e3 < 2.6);
  // Resolution: the same smooth flow solved on 16^2, 32^2 and 64^2, compared on the 16^2 points.
  const auto on = [&](int64_t r) {
    const auto w =
        fno::data::ns_solve(smooth_field(r).unsqueeze(0),
                            fno::data::ns_paper_forcing(r, torch::TensorOptions()), 1e-2, 1e-3,
                            500, 1)
            .select(3, 0)[0];
    const int64_t k = r / 16;
    return w.slice(0, 0, r, k).slice(1, 0, r, k);
  };
  const auto fine = on(64);
  const double c16 = rel(on(16), fine), c32 = rel(on(32), fine);
  MESSAGE("16^2, 32^2 against 64^2: " << c16 << ", " << c32);
  CHECK(c16 > 0);
  CHECK(c32 < c16 / 100);
}

TEST_CASE("Navier-Stokes: the step of few passes is the scheme's plain arithmetic (float64)") {
  // A nonlinear flow with the forcing, at a power of 2 and at an even R that is not one.
  for (const int64_t r : {32, 24}) {
    INFO("R = " << r);
    const auto w0 = torch::stack({fno::data::ns_initial_vorticity(3, 0, r), smooth_field(r)});
    const auto f = fno::data::ns_paper_forcing(r, torch::TensorOptions());
    const auto ours = fno::data::ns_solve(w0, f, 1e-3, 1e-3, 100, 3);
    const auto plain = reference_solve(w0, f, 1e-3, 1e-3, 100, 3);
    REQUIRE(ours.sizes() == plain.sizes());
    CHECK((ours.scalar_type() == torch::kDouble));
    const double e = rel(ours, plain);
    MESSAGE("R " << r << ": relative difference " << e);
    CHECK(e < 1e-12);
    // Unforced too (the forcing rides in the advection's transform).
    CHECK(rel(fno::data::ns_solve(w0, torch::Tensor(), 1e-3, 1e-3, 50, 2),
              reference_solve(w0, torch::Tensor(), 1e-3, 1e-3, 50, 2)) < 1e-12);
  }
  // Records subsampled by the solve: every k-th point of the full records.
  const auto w0 = fno::data::ns_initial_vorticity(4, 1, 32).unsqueeze(0);
  const auto full = fno::data::ns_solve(w0, torch::Tensor(), 1e-3, 1e-3, 20, 2);
  const auto sub = fno::data::ns_solve(w0, torch::Tensor(), 1e-3, 1e-3, 20, 2,
                                       fno::data::NsSolveOptions().subsample(4));
  REQUIRE(sub.sizes() == torch::IntArrayRef({1, 8, 8, 2}));
  CHECK(torch::equal(sub, full.slice(1, 0, 32, 4).slice(2, 0, 32, 4)));
}

TEST_CASE("Navier-Stokes: float32 follows float64 within float32's rounding") {
  const int64_t r = 32;
  const auto w0 = torch::stack(
      {fno::data::ns_initial_vorticity(5, 0, r), fno::data::ns_initial_vorticity(5, 1, r)});
  const auto f = fno::data::ns_paper_forcing(r, torch::TensorOptions());
  const auto f64 = fno::data::ns_solve(w0, f, 1e-3, 1e-3, 100, 3);
  const auto f32 = fno::data::ns_solve(w0, f, 1e-3, 1e-3, 100, 3,
                                       fno::data::NsSolveOptions().precision(torch::kFloat));
  CHECK((f32.scalar_type() == torch::kFloat));
  REQUIRE(f32.sizes() == f64.sizes());
  for (int64_t rec = 0; rec < 3; ++rec) {
    const double e = rel(f32.select(3, rec).to(torch::kDouble), f64.select(3, rec));
    MESSAGE("record " << rec << " (step " << 100 * (rec + 1) << "): float32 against float64 " << e);
    // float32's unit round-off is 6e-8: a few hundred steps of it, not more.
    CHECK(e > 1e-9);
    CHECK(e < 1e-5);
  }
  // The exactly decaying field: float32's rounding of Crank-Nicolson's factor.
  const auto [x, y] = grid(r);
  const auto c = (torch::cos(2 * kPi * x) * torch::cos(2 * kPi * y)).unsqueeze(0);
  const auto d32 = fno::data::ns_solve(c, torch::Tensor(), 1e-2, 1e-3, 100, 1,
                                       fno::data::NsSolveOptions().precision(torch::kFloat));
  const double x_step = 1e-3 * 1e-2 * 4 * kPi * kPi * 2;
  const double cn = (1 - x_step / 2) / (1 + x_step / 2);
  CHECK(rel(d32[0].select(2, 0).to(torch::kDouble), c[0] * std::pow(cn, 100.0)) < 1e-5);
}

TEST_CASE("Navier-Stokes: the initial field has the paper's covariance, per (seed, sample)") {
  const int64_t r = 32;
  const double alpha = 2.5, tau = 7;
  // Var w(x) = sum_k 2 sigma^2 (4 pi^2 |k|^2 + tau^2)^(-alpha), k != 0, sigma = tau^(alpha-1).
  const auto k = torch::fft::fftfreq(r, 1.0 / r, torch::kDouble);
  const auto k_sq = k.square().view({-1, 1}) + k.square().view({1, -1});
  auto terms = 2 * std::pow(tau, 2 * (alpha - 1)) * (4 * kPi * kPi * k_sq + tau * tau).pow(-alpha);
  terms.index_put_({0, 0}, 0.0);
  const double expected = terms.sum().item<double>();
  std::vector<torch::Tensor> fields;
  for (int64_t i = 0; i < 200; ++i) fields.push_back(fno::data::ns_initial_vorticity(11, i, r));
  const auto all = torch::stack(fields);
  const double variance = all.square().mean().item<double>();
  MESSAGE("variance " << variance << ", expected " << expected);
  CHECK(std::abs(variance / expected - 1) < 0.08);
  CHECK(std::abs(all.mean().item<double>()) < 0.05 * std::sqrt(expected));
  // Sample i depends on (seed, i) only.
  CHECK(torch::equal(fno::data::ns_initial_vorticity(11, 7, r), fields[7]));
  CHECK(!torch::equal(fno::data::ns_initial_vorticity(12, 7, r), fields[7]));
}

TEST_CASE("Navier-Stokes: a run that blows up names the step and writes no file") {
  const int64_t r = 16;
  const auto w0 = 1e3 * smooth_field(r).unsqueeze(0);
  try {
    fno::data::ns_solve(w0, torch::Tensor(), 1e-5, 0.5, 200, 1);
    FAIL("no blow-up");
  } catch (const fno::data::NsBlowUp& e) {
    CHECK(e.step() >= 1);
    CHECK(e.step() <= 200);
    CHECK(std::string(e.what()).find("smaller --dt") != std::string::npos);
  }
  // The exact first non-finite step, in both precisions: checked once per record, then the
  // record solved again step by step, it is the step that a check after every step finds
  // (one step per record), wherever it falls in a record; the steps before it are finite.
  for (const auto precision : {torch::kDouble, torch::kFloat}) {
    INFO("precision " << precision);
    const int64_t exact = blow_up_step(w0, 0.5, 1, 200, precision);
    MESSAGE("blow-up at step " << exact << " in " << precision);
    REQUIRE(exact > 1);
    CHECK(blow_up_step(w0, 0.5, 200, 1, precision) == exact);
    CHECK(blow_up_step(w0, 0.5, 7, 30, precision) == exact);
    CHECK(blow_up_step(w0, 0.5, exact, 2, precision) == exact);  // the record's last step
    CHECK(blow_up_step(w0, 0.5, exact - 1, 1, precision) == 0);
    CHECK(blow_up_step(w0, 0.5, 1, exact - 1, precision) == 0);
  }
  // From a file: the same field blows up in generate_navier_stokes, and no file appears.
  const auto init = out_path("ns_blowup_init.h5"), out = new_out("ns_blowup.h5");
  fno::data::write_hdf5(init, {{"w0", w0.to(torch::kFloat)}});
  CHECK_THROWS_AS(fno::data::generate_navier_stokes(NavierStokesGenOptions()
                                                        .resolution(r)
                                                        .samples(1)
                                                        .viscosity(1e-5)
                                                        .dt(0.5)
                                                        .t_final(100)
                                                        .record_every(100)
                                                        .forcing("none")
                                                        .initial(init)
                                                        .device("cpu")
                                                        .out(out)),
                  fno::data::NsBlowUp);
  CHECK(!std::filesystem::exists(out));
}

TEST_CASE("Navier-Stokes files: records at (r + 1) record_every, subsampled, whatever the batch") {
  // From an initial file whose fields decay exactly: the records are known.
  const int64_t r = 16;
  const auto [x, y] = grid(r);
  const auto w0 = torch::cos(2 * kPi * x) * torch::cos(2 * kPi * y);
  const auto init = out_path("ns_init.h5");
  fno::data::write_hdf5(init, {{"w0", torch::stack({w0, 2 * w0}).to(torch::kFloat)}});
  const auto out = new_out("ns_decay.h5");
  fno::data::generate_navier_stokes(
      small(out).samples(2).forcing("none").initial(init).subsample(2).dt(1e-3));
  const auto u = fno::data::load_hdf5(out, fno::data::LoadOptions().x_key("u").y_key("u")).x;
  REQUIRE(u.sizes() == torch::IntArrayRef({2, 1, 8, 8, 3}));
  const auto a = fno::data::load_hdf5(out, fno::data::LoadOptions().x_key("a").y_key("a")).x;
  REQUIRE(a.sizes() == torch::IntArrayRef({2, 1, 8, 8}));
  const auto w0s = w0.slice(0, 0, r, 2).slice(1, 0, r, 2);
  CHECK(rel(a[1][0].to(torch::kDouble), 2 * w0s) < 1e-7);
  for (int64_t rec = 0; rec < 3; ++rec) {
    const double t = 0.1 * static_cast<double>(rec + 1);
    const auto exact = 2 * w0s * std::exp(-1e-2 * 8 * kPi * kPi * t);
    INFO("record " << rec);
    CHECK(rel(u[1][0].select(2, rec).to(torch::kDouble), exact) < 1e-6);
  }
  // The GRF's samples: the same bytes whatever the batch (CPU), and a test split.
  const auto one = new_out("ns_b1.h5"), three = new_out("ns_b3.h5");
  fno::data::generate_navier_stokes(small(one).batch_size(1));
  fno::data::generate_navier_stokes(small(three).batch_size(3));
  CHECK(read_bytes(one) == read_bytes(three));
  const auto split = new_out("ns_split.h5");
  const auto summary = fno::data::generate_navier_stokes(small(split).test_samples(1));
  REQUIRE(summary.files.size() == 2);
  const auto all = fno::data::load_hdf5(one, fno::data::LoadOptions().x_key("u").y_key("u")).x;
  const auto test =
      fno::data::load_hdf5(summary.files[1], fno::data::LoadOptions().x_key("u").y_key("u")).x;
  CHECK(torch::equal(test[0], all[2]));
  CHECK(summary.max_abs > 0);
  // float32: the same records within float32's rounding, and the files say so.
  const auto single = new_out("ns_f32.h5");
  fno::data::generate_navier_stokes(small(single).precision("float32"));
  const auto u32 = fno::data::load_hdf5(single, fno::data::LoadOptions().x_key("u").y_key("u")).x;
  CHECK(rel(u32.to(torch::kDouble), all.to(torch::kDouble)) < 1e-5);
  CHECK(!torch::equal(u32, all));
  CHECK(text_attribute(single, "precision") == "float32");
  CHECK(text_attribute(one, "precision") == "float64");
}

TEST_CASE("Navier-Stokes: the automatic CUDA batch: free memory, at most 256 and the samples") {
  using fno::data::ns_auto_batch;
  using fno::data::ns_bytes_per_sample;
  const int64_t gib = int64_t{1} << 30;
  // The paper's grid: 256^2 solved, 64^2 stored, 50 records.
  const int64_t per64 = ns_bytes_per_sample(256, 4, 50, torch::kDouble);
  const int64_t per32 = ns_bytes_per_sample(256, 4, 50, torch::kFloat);
  MESSAGE("bytes per sample at 256^2, T 50: float64 " << per64 << ", float32 " << per32);
  CHECK(per64 == 2 * per32 - 256 * 256 * 8);  // (the float64 initial field either way)
  CHECK(ns_auto_batch(256, 4, 50, torch::kDouble, 1200, 70 * gib) == fno::data::kNsMaxAutoBatch);
  CHECK(ns_auto_batch(256, 4, 50, torch::kDouble, 100, 70 * gib) == 100);
  // Memory bounds it: the largest power of 2 with twice its bytes free.
  const int64_t b = ns_auto_batch(256, 4, 50, torch::kDouble, 1200, 40 * per64);
  CHECK(b == 16);
  CHECK(ns_auto_batch(256, 4, 50, torch::kFloat, 1200, 40 * per64) == 32);
  CHECK(ns_auto_batch(4096, 1, 50, torch::kDouble, 1200, 0) == 1);
}

TEST_CASE("Navier-Stokes options: one-line errors naming the value") {
  const auto out = out_path("ns_refused.h5");
  refused(small(out).viscosity(0), "viscosity must be > 0, got 0");
  refused(small(out).viscosity(-1e-3), "viscosity must be > 0");
  refused(small(out).dt(0), "dt must be > 0");
  // A dt so small that the steps of a sample pass 2^53 (they would overflow 64 bits).
  refused(small(out).dt(1e-300),
          "--dt 1e-300 makes t_final / dt = 3e+299 time steps per sample, over 2^53");
  refused(small(out).record_every(0.015), "record_every (0.015) must be a whole number of steps");
  refused(small(out).t_final(0.25), "t_final (0.25) must be a whole number of records");
  refused(small(out).resolution(15), "resolution must be even");
  refused(small(out).subsample(3), "subsample 3 does not divide resolution = 16");
  refused(small(out).forcing("kolmogorov"), "forcing must be paper or none, got 'kolmogorov'");
  refused(small(out).precision("float16"), "precision must be float64 or float32, got 'float16'");
  refused(small(out).test_samples(3), "test_samples must be in [0, samples - 1]");
  refused(small(out).samples(1000000000).resolution(4096).t_final(100),
          "bytes of records, over 2^62: fewer samples, records or grid points");
  // An initial file of the wrong shape, or too few samples, or none.
  const auto init = out_path("ns_init_bad.h5");
  fno::data::write_hdf5(init, {{"w0", torch::zeros({3, 8, 8})}});
  refused(small(out).initial(init), "holds w0 of shape [8, 8] for 3 samples; expected (3, 16, 16)");
  const auto init2 = out_path("ns_init_few.h5");
  fno::data::write_hdf5(init2, {{"w0", torch::zeros({2, 16, 16})}});
  refused(small(out).initial(init2), "for 2 samples; expected (3, 16, 16)");
  refused(small(out).initial(out_path("ns_no_such_file.h5")), "initial: ");
}

TEST_CASE("Navier-Stokes records as training pairs: space-time and recurrent") {
  const auto out = new_out("ns_pairs.h5");
  fno::data::generate_navier_stokes(small(out).t_final(0.5));  // 3 samples, 16^2, 5 records
  const auto u = fno::data::load_ns_records(out, fno::data::NsLoadOptions().t_in(2).t_out(3));
  REQUIRE(u.sizes() == torch::IntArrayRef({3, 16, 16, 5}));
  CHECK((u.scalar_type() == torch::kFloat));
  const auto half = fno::data::load_ns_records(
      out, fno::data::NsLoadOptions().t_in(2).t_out(3).subsample(2).n_samples(2));
  REQUIRE(half.sizes() == torch::IntArrayRef({2, 8, 8, 5}));  // time is not subsampled
  CHECK(torch::equal(half, u.slice(0, 0, 2).slice(1, 0, 16, 2).slice(2, 0, 16, 2)));

  const auto st = fno::data::ns_space_time_pairs(u, 2, 3);
  REQUIRE(st.x.sizes() == torch::IntArrayRef({3, 2, 16, 16, 3}));
  REQUIRE(st.y.sizes() == torch::IntArrayRef({3, 1, 16, 16, 3}));
  for (int64_t t = 0; t < 3; ++t) {
    CHECK(torch::equal(st.x.select(4, t).select(1, 1), u.select(3, 1)));  // input record 1
    CHECK(torch::equal(st.y.select(4, t).select(1, 0), u.select(3, 2 + t)));
  }
  fno::data::validate(st, "space-time pairs");
  const auto rec = fno::data::ns_recurrent_pairs(u, 2, 3);
  REQUIRE(rec.x.sizes() == torch::IntArrayRef({3, 2, 16, 16}));
  REQUIRE(rec.y.sizes() == torch::IntArrayRef({3, 3, 16, 16}));
  CHECK(torch::equal(rec.x.select(1, 0), u.select(3, 0)));
  CHECK(torch::equal(rec.y.select(1, 2), u.select(3, 4)));

  // One-line errors naming the file.
  CHECK_THROWS_WITH_AS(
      fno::data::load_ns_records(out, fno::data::NsLoadOptions().t_in(4).t_out(3)),
      doctest::Contains("ns_pairs.h5: dataset 'u' holds 5 records; t_in 4 and t_out 3 need 7"),
      std::runtime_error);
  CHECK_THROWS_WITH_AS(fno::data::load_ns_records(out, fno::data::NsLoadOptions().key("a")),
                       doctest::Contains("dataset 'a' has rank 3, expected (N, R, R, T) records"),
                       std::runtime_error);
  CHECK_THROWS_AS(fno::data::ns_recurrent_pairs(u, 4, 2), c10::Error);
}
