// The 2D Navier-Stokes generator (see fno_data/navier_stokes_gen.h): the
// paper's initial fields and forcing, its pseudo-spectral scheme in float64 on
// the real half spectrum, and the records streamed into HDF5 files by the
// machinery the other generators use (gen_common.h).
#include <fno_data/navier_stokes_gen.h>

#include <fno_data/darcy.h>

#include "gen_common.h"

#include <c10/util/Exception.h>
#include <torch/fft.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace fno::data {
namespace {

using gen::kPi;
/// Bumped whenever the same options would give different data.
constexpr int kGeneratorVersion = 1;
constexpr int64_t kMaxResolution = 4096;
/// At most this many records (the datasets' chunks hold one sample each).
constexpr int64_t kMaxRecords = 100000;

const std::vector<int64_t> kDims{1, 2};

/// The operators of the scheme on the half spectrum of an R x R grid.
struct SpectralOps {
  torch::Tensor ikx, iky;     // 2 pi i k_x, 2 pi i k_y (0 at the Nyquist modes), complex128
  torch::Tensor inv_lap;      // 1 / (4 pi^2 |k|^2), 0 at k = 0
  torch::Tensor lap;          // 4 pi^2 |k|^2
  torch::Tensor dealias;      // 1 where |k_x|, |k_y| <= (2/3) (R/2), else 0
};

SpectralOps spectral_ops(int64_t r, const torch::Device& device) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  const double n = static_cast<double>(r);
  const auto kx = torch::fft::fftfreq(r, 1.0 / n, f64).view({-1, 1});   // along x (dim 1)
  const auto ky = torch::fft::rfftfreq(r, 1.0 / n, f64).view({1, -1});  // along y (dim 2)
  const double nyquist = n / 2.0;
  const auto no_nyquist = [&](const torch::Tensor& k) {
    return torch::where(k.abs() >= nyquist, torch::zeros_like(k), k);
  };
  SpectralOps ops;
  const auto i2pi = c10::complex<double>(0.0, 2.0 * kPi);
  ops.ikx = no_nyquist(kx).expand({r, r / 2 + 1}).to(torch::kComplexDouble) * i2pi;
  ops.iky = no_nyquist(ky).expand({r, r / 2 + 1}).to(torch::kComplexDouble) * i2pi;
  ops.lap = (4.0 * kPi * kPi) * (kx.square() + ky.square());
  ops.inv_lap = ops.lap.reciprocal();
  ops.inv_lap.index_put_({0, 0}, 0.0);
  const double cut = 2.0 / 3.0 * nyquist;
  ops.dealias = ((kx.abs() <= cut) & (ky.abs() <= cut)).to(torch::kDouble);
  return ops;
}

// x: [B, R, R] -> x[:, ::k, ::k] (and likewise for [B, R, R, T])
torch::Tensor every_kth(const torch::Tensor& x, int64_t k) {
  if (k == 1) return x;
  return x.slice(1, 0, x.size(1), k).slice(2, 0, x.size(2), k);
}

bool is_whole(double ratio) {
  return std::isfinite(ratio) && ratio >= 0.5 &&
         std::abs(ratio - std::round(ratio)) <= 1e-9 * std::max(1.0, std::abs(ratio));
}

std::string number_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

/// The whole `w0` of the initial file, checked against the options.
// -> [N, R, R] float64, CPU (N = samples)
torch::Tensor load_initial(const NavierStokesGenOptions& o) {
  FieldPairs pairs;
  try {
    pairs = load_hdf5(o.initial(), LoadOptions().x_key("w0").y_key("w0"));
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, "initial: ", e.what());
  }
  const auto& w = pairs.x;  // [N, 1, R1, R2]
  TORCH_CHECK_VALUE(w.dim() == 4 && w.size(2) == o.resolution() && w.size(3) == o.resolution() &&
                        w.size(0) >= o.samples(),
                    "initial: '", o.initial(), "' holds w0 of shape ", w.sizes().slice(2),
                    " for ", w.size(0), " samples; expected (", o.samples(), ", ", o.resolution(),
                    ", ", o.resolution(), ") or more samples, for --samples ", o.samples(),
                    " --resolution ", o.resolution());
  return w.narrow(0, 0, o.samples()).squeeze(1).to(torch::kDouble);
}

}  // namespace

torch::Tensor ns_initial_vorticity(uint64_t seed, int64_t index, int64_t resolution, double alpha,
                                   double tau) {
  TORCH_CHECK(resolution >= 2, "ns_initial_vorticity: resolution must be >= 2, got ", resolution);
  TORCH_CHECK(index >= 0, "ns_initial_vorticity: index must be >= 0, got ", index);
  TORCH_CHECK(alpha > 0 && tau > 0, "ns_initial_vorticity: alpha and tau must be > 0, got alpha=",
              alpha, " tau=", tau);
  const int64_t r = resolution;
  gen::StandardNormals normal(seed, index);
  torch::Tensor z = torch::empty({r, r, 2}, torch::kDouble);
  double* p = z.data_ptr<double>();
  for (int64_t i = 0; i < z.numel(); ++i) p[i] = normal();
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const double n = static_cast<double>(r);
  const auto k = torch::fft::fftfreq(r, 1.0 / n, f64);
  const auto k_sq = k.square().view({-1, 1}) + k.square().view({1, -1});
  const double sigma = std::pow(tau, alpha - 1.0);  // tau^(alpha - d/2), d = 2
  torch::Tensor amp =
      std::sqrt(2.0) * sigma * (4.0 * kPi * kPi * k_sq + tau * tau).pow(-alpha / 2.0);
  amp.index_put_({0, 0}, 0.0);
  const auto coeff = torch::view_as_complex(z) * amp;
  return torch::real(torch::fft::ifft2(coeff, c10::nullopt, {0, 1}, "forward")).contiguous();
}

torch::Tensor ns_paper_forcing(int64_t resolution, const torch::TensorOptions& options) {
  TORCH_CHECK(resolution >= 1, "ns_paper_forcing: resolution must be >= 1, got ", resolution);
  const auto opts = options.dtype(torch::kDouble);
  const auto t = torch::arange(resolution, opts) / static_cast<double>(resolution);
  const auto s = t.view({-1, 1}) + t.view({1, -1});  // x + y
  return 0.1 * (torch::sin(2.0 * kPi * s) + torch::cos(2.0 * kPi * s));
}

torch::Tensor ns_solve(const torch::Tensor& w0, const torch::Tensor& f, double viscosity,
                       double dt, int64_t steps_per_record, int64_t records,
                       const std::function<void(int64_t)>& on_record) {
  TORCH_CHECK(w0.dim() == 3 && w0.size(1) == w0.size(2) && w0.size(1) >= 2 &&
                  w0.size(1) % 2 == 0,
              "ns_solve: w0 must be [B, R, R] with R even, got shape ", w0.sizes());
  TORCH_CHECK(viscosity > 0 && dt > 0, "ns_solve: viscosity and dt must be > 0, got ", viscosity,
              " and ", dt);
  TORCH_CHECK(steps_per_record >= 1 && records >= 1,
              "ns_solve: steps_per_record and records must be >= 1, got ", steps_per_record,
              " and ", records);
  torch::NoGradGuard no_grad;
  const int64_t b = w0.size(0), r = w0.size(1);
  const auto device = w0.device();
  const auto ops = spectral_ops(r, device);
  torch::Tensor w_h = torch::fft::rfft2(w0.to(torch::kDouble), c10::nullopt, kDims);
  torch::Tensor f_dt;  // dt f_hat
  if (f.defined()) {
    TORCH_CHECK(f.dim() == 2 && f.size(0) == r && f.size(1) == r, "ns_solve: f must be [", r,
                ", ", r, "], got shape ", f.sizes());
    f_dt = dt * torch::fft::rfft2(f.to(device, torch::kDouble), c10::nullopt, {0, 1});
  }
  // Crank-Nicolson's factors for the diffusion.
  const auto half = 0.5 * dt * viscosity * ops.lap;
  const auto keep = (1.0 - half) / (1.0 + half);
  const auto gain = (1.0 + half).reciprocal();
  // dt F_hat, dealiased, with the 1 / (1 + half) factor folded in.
  const auto minus_dt_gain = -dt * gain * ops.dealias;
  const auto f_gain = f_dt.defined() ? f_dt * gain : torch::Tensor();
  // u = d psi / dy and v = -d psi / dx from w's spectrum (psi_hat = w_hat / |k|^2).
  const auto u_of_w = ops.iky * ops.inv_lap, v_of_w = -ops.ikx * ops.inv_lap;
  auto out = torch::empty({b, r, r, records}, w0.options().dtype(torch::kDouble));
  // Finite steps so far, counted on the device (no sync per step).
  auto finite_steps = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
  int64_t step = 0;
  for (int64_t rec = 0; rec < records; ++rec) {
    for (int64_t s = 0; s < steps_per_record; ++s, ++step) {
      // u = d psi / dy, v = -d psi / dx, and w's gradient, on the grid.
      const auto fields = torch::fft::irfft2(
          torch::stack({w_h * u_of_w, w_h * v_of_w, w_h * ops.ikx, w_h * ops.iky}),
          torch::IntArrayRef{r, r}, {2, 3});
      const auto adv = fields[0] * fields[2] + fields[1] * fields[3];  // u . grad(w)
      const auto adv_h = torch::fft::rfft2(adv, c10::nullopt, kDims);
      w_h = w_h * keep + adv_h * minus_dt_gain;
      if (f_gain.defined()) w_h += f_gain;
      finite_steps += torch::isfinite(torch::view_as_real(w_h)).all();
    }
    const auto w = torch::fft::irfft2(w_h, torch::IntArrayRef{r, r}, kDims);
    const int64_t finite = finite_steps.item<int64_t>();
    if (finite < step) {
      throw NsBlowUp(finite + 1,
                     "the vorticity is not finite after step " + std::to_string(finite + 1) +
                         " (t = " + number_text(static_cast<double>(finite + 1) * dt) +
                         "): the run blew up; try a smaller --dt (now " + number_text(dt) + ")");
    }
    out.select(3, rec).copy_(w);
    if (on_record) on_record(rec);
  }
  return out;
}

namespace {

// Every check but the initial file's.
void check_options(const NavierStokesGenOptions& o) {
  TORCH_CHECK_VALUE(o.resolution() >= 8 && o.resolution() <= kMaxResolution &&
                        o.resolution() % 2 == 0,
                    "resolution must be even and in [8, ", kMaxResolution, "], got ",
                    o.resolution());
  gen::check_sample_counts(o.samples(), o.test_samples());
  TORCH_CHECK_VALUE(o.subsample() >= 1 && o.resolution() % o.subsample() == 0, "subsample ",
                    o.subsample(), " does not divide resolution = ", o.resolution(),
                    " (the periodic grid must stay uniform)");
  TORCH_CHECK_VALUE(std::isfinite(o.viscosity()) && o.viscosity() > 0,
                    "viscosity must be > 0, got ", o.viscosity());
  TORCH_CHECK_VALUE(std::isfinite(o.dt()) && o.dt() > 0, "dt must be > 0, got ", o.dt());
  TORCH_CHECK_VALUE(std::isfinite(o.record_every()) && o.record_every() > 0,
                    "record_every must be > 0, got ", o.record_every());
  TORCH_CHECK_VALUE(std::isfinite(o.t_final()) && o.t_final() > 0, "t_final must be > 0, got ",
                    o.t_final());
  TORCH_CHECK_VALUE(is_whole(o.record_every() / o.dt()), "record_every (", o.record_every(),
                    ") must be a whole number of steps of dt (", o.dt(), ")");
  TORCH_CHECK_VALUE(is_whole(o.t_final() / o.record_every()), "t_final (", o.t_final(),
                    ") must be a whole number of records of record_every (", o.record_every(), ")");
  TORCH_CHECK_VALUE(std::round(o.t_final() / o.record_every()) <= kMaxRecords, "t_final / ",
                    "record_every must be at most ", kMaxRecords, " records, got ",
                    std::round(o.t_final() / o.record_every()));
  TORCH_CHECK_VALUE(o.forcing() == "paper" || o.forcing() == "none", "forcing must be paper or ",
                    "none, got '", o.forcing(), "'");
  TORCH_CHECK_VALUE(std::isfinite(o.alpha()) && o.alpha() > 0, "alpha must be > 0, got ",
                    o.alpha());
  TORCH_CHECK_VALUE(std::isfinite(o.tau()) && o.tau() > 0, "tau must be > 0, got ", o.tau());
  {
    // The records' bytes, samples x R'^2 x T x 4, must stay inside 64 bits (HDF5).
    const double stored = static_cast<double>(o.resolution() / o.subsample());
    const double bytes = static_cast<double>(o.samples()) * stored * stored *
                         std::round(o.t_final() / o.record_every()) * 4.0;
    TORCH_CHECK_VALUE(bytes < 0x1p62, "samples x stored grid x records is ", bytes,
                      " bytes of records, over 2^62: fewer samples, records or grid points");
  }
  gen::check_batch_out_device(o.batch_size(), o.out(), navier_stokes_output_paths(o), o.device());
}

}  // namespace

void validate_navier_stokes_options(const NavierStokesGenOptions& o) {
  check_options(o);
  if (!o.initial().empty()) load_initial(o);
}

std::pair<int64_t, int64_t> ns_schedule(const NavierStokesGenOptions& o) {
  return {std::llround(o.record_every() / o.dt()), std::llround(o.t_final() / o.record_every())};
}

std::vector<std::string> navier_stokes_output_paths(const NavierStokesGenOptions& o) {
  return gen::output_paths(o.out(), o.test_samples());
}

DarcyGenSummary generate_navier_stokes(const NavierStokesGenOptions& o,
                                       const DarcyGenHooks& hooks) {
  check_options(o);
  // (read once: load_initial checks it as validate_navier_stokes_options does)
  const torch::Tensor initial = o.initial().empty() ? torch::Tensor() : load_initial(o);
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const torch::Device device = gen::resolve_device(o.device());
  const auto [steps_per_record, records] = ns_schedule(o);
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  const int64_t stored = r / k;
  const int64_t total = o.samples();
  const torch::Tensor forcing =
      o.forcing() == "paper" ? ns_paper_forcing(r, torch::TensorOptions().device(device))
                             : torch::Tensor();

  const int64_t auto_batch = std::clamp<int64_t>((int64_t{1} << 22) / (r * r), 1, 64);
  const int64_t batch_size =
      o.batch_size() > 0 ? o.batch_size() : (device.is_cuda() ? auto_batch : 1);
  using gen::format_number;
  const auto settings = gen::resume_settings(
      {"ns", kGeneratorVersion, r, total, o.test_samples(), o.seed(), k, device.is_cuda(),
       batch_size},
      {{"viscosity", format_number(o.viscosity())},
       {"dt", format_number(o.dt())},
       {"t_final", format_number(o.t_final())},
       {"record_every", format_number(o.record_every())},
       {"forcing", o.forcing()},
       {"initial", o.initial().empty() ? "grf" : o.initial()},
       {"alpha", format_number(o.alpha())},
       {"tau", format_number(o.tau())}});
  gen::GenOutput output(
      navier_stokes_output_paths(o), total, o.test_samples(),
      {{"a", {stored, stored}}, {"u", {stored, stored, records}}},
      gen::resume_of(hooks, o.out(), settings));
  if (hooks.resume && hooks.resumed) hooks.resumed(output.kept(), total);
  DarcyGenSummary summary;
  summary.device = device.str();
  const int64_t units = total * records;
  for (int64_t start = output.kept(); start < total; start += batch_size) {
    output.check_stop(hooks, start);
    const int64_t b = std::min(batch_size, total - start);
    torch::Tensor w0;
    if (initial.defined()) {
      w0 = initial.narrow(0, start, b);
    } else {
      std::vector<torch::Tensor> fields;
      for (int64_t i = 0; i < b; ++i) {
        fields.push_back(ns_initial_vorticity(o.seed(), start + i, r, o.alpha(), o.tau()));
      }
      w0 = torch::stack(fields);
    }
    w0 = w0.to(device);
    // Samples [first, first + count) solved together: after each record, the
    // stop request and the progress in records.
    const auto solve = [&](int64_t first, int64_t count) {
      return ns_solve(w0.narrow(0, first - start, count), forcing, o.viscosity(), o.dt(),
                      steps_per_record, records, [&](int64_t rec) {
                        output.check_stop(hooks, first);
                        if (hooks.progress) hooks.progress(first * records + (rec + 1) * count, units);
                      });
    };
    torch::Tensor u;
    if (device.is_cpu()) {
      // One sample at a time: its numbers are then its own whatever the batch.
      std::vector<torch::Tensor> us;
      for (int64_t i = 0; i < b; ++i) us.push_back(solve(start + i, 1));
      u = torch::cat(us);
    } else {
      u = solve(start, b);
    }
    const torch::Tensor a32 = every_kth(w0, k).to(torch::kCPU, torch::kFloat);
    const torch::Tensor u32 = every_kth(u, k).to(torch::kCPU, torch::kFloat);
    TORCH_CHECK(torch::isfinite(u32).all().item<bool>(), "samples ", start, "..", start + b - 1,
                ": the vorticity exceeds float32's range");
    // The largest |w| of each sample, stored (a and u).
    const torch::Tensor max_abs =
        torch::maximum(a32.abs().flatten(1).amax(1), u32.abs().flatten(1).amax(1));
    output.write(start, {a32, u32}, {{"max_abs", max_abs}});
  }
  output.check_stop(hooks, total);  // before the files appear

  using gen::number_attr;
  using gen::text_attr;
  output.commit([&](size_t p) {
    const gen::GenOutput::Part& part = output.parts()[p];
    std::vector<Attribute> attrs{
        text_attr("generator",
                  "fno_datagen --problem ns: 2D incompressible Navier-Stokes in vorticity form "
                  "on the unit torus, as in the FNO paper"),
        number_attr("generator_version", kGeneratorVersion),
        text_attr("problem", "ns"),
        text_attr("equation",
                  "dw/dt + u.grad(w) = nu Laplace(w) + f, u = (dpsi/dy, -dpsi/dx), "
                  "-Laplace(psi) = w, on [0,1)^2 periodic"),
        text_attr("layout",
                  "a = w(t=0): (sample, i, j); u = w at t = (r+1) record_every: (sample, i, j, "
                  "r); point (i, j) at (x, y) = (i, j) / R'"),
        number_attr("viscosity", o.viscosity()),
        number_attr("dt", o.dt()),
        number_attr("t_final", o.t_final()),
        number_attr("record_every", o.record_every()),
        number_attr("records", static_cast<double>(records)),
        number_attr("steps_per_record", static_cast<double>(steps_per_record)),
        text_attr("forcing", o.forcing() == "paper"
                                 ? "0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))"
                                 : "none"),
        text_attr("scheme",
                  "pseudo-spectral, float64, real half spectrum; 2/3-rule dealiasing of "
                  "u.grad(w); Crank-Nicolson diffusion, explicit Euler advection and forcing "
                  "(the paper's ns_2d.py)"),
    };
    gen::append(attrs, gen::grid_attrs(r, k, stored));
    gen::append(attrs, gen::split_attrs(part.split, part.count, part.first, total));
    attrs.push_back(text_attr("device", device.is_cuda() ? "cuda" : "cpu"));
    attrs.push_back(text_attr("command_line", o.command_line()));
    if (o.initial().empty()) {
      attrs.push_back(text_attr(
          "initial", "Gaussian random field: Re ifft2(sqrt(2) tau^(alpha-1) (4 pi^2 |k|^2 + "
                     "tau^2)^(-alpha/2) (z1 + i z2)), zero mean (the paper's GaussianRF)"));
      attrs.push_back(number_attr("alpha", o.alpha()));
      attrs.push_back(number_attr("tau", o.tau()));
      gen::append(attrs, gen::seed_attrs(o.seed()));
    } else {
      attrs.push_back(text_attr("initial", "w0 of " + o.initial()));
    }
    return attrs;
  });
  summary.max_abs = output.stat_max("max_abs");
  summary.files = navier_stokes_output_paths(o);
  summary.samples = total;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace fno::data
