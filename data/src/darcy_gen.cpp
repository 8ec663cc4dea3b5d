// Darcy-flow data generation (see fno_data/darcy_gen.h): the GRF by DCT-I, the
// matrix-free Darcy operator, the DST-I Poisson preconditioner, batched PCG,
// and the generator's sampler and solver, which run_generator (gen_common.h)
// streams into HDF5 files (--inputs-only: darcy_inputs.cpp).
#include <fno_data/darcy_gen.h>

#include <fno_data/darcy.h>

#include "darcy_internal.h"
#include "gen_common.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/fft.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace fno::data {
namespace {

using darcy_detail::kGeneratorVersion;
using gen::kPi;

// x: [B, R, R] -> the interior [B, R-2, R-2] (a view)
torch::Tensor interior(const torch::Tensor& x) {
  return x.slice(1, 1, x.size(1) - 1).slice(2, 1, x.size(2) - 1);
}

/// Per-sample dot products, each summed in an order that does not depend on
/// the batch, so a sample's CG iterates do not depend on its batch. On the CPU
/// one fixed order (8 interleaved partial sums) whatever the thread count; on
/// other devices one reduction per sample (a batched reduction's order would
/// depend on the batch size).
// a, b: [B, ...] float64 -> [B] float64
torch::Tensor batch_dot(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t batch = a.size(0);
  if (!a.is_cpu()) {
    std::vector<torch::Tensor> dots;
    dots.reserve(static_cast<size_t>(batch));
    for (int64_t s = 0; s < batch; ++s) dots.push_back((a[s] * b[s]).sum());
    return torch::stack(dots);
  }
  const torch::Tensor ac = a.contiguous();
  const torch::Tensor bc = b.contiguous();
  const int64_t n = batch == 0 ? 0 : ac.numel() / batch;
  torch::Tensor out = torch::empty({batch}, ac.options());
  const double* pa = ac.data_ptr<double>();
  const double* pb = bc.data_ptr<double>();
  double* po = out.data_ptr<double>();
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const double* x = pa + s * n;
      const double* y = pb + s * n;
      double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * y[i + j];
      }
      for (int j = 0; i < n; ++i, ++j) acc[j] += x[i] * y[i];
      po[s] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
  });
  return out;
}

/// -2 sum_{m=1}^{n} x_m sin(pi k m / (n + 1)), k = 1..n, along the last dim (a
/// scaled DST-I), as the imaginary part of the real FFT of the odd extension
/// [0, x, 0, -reversed x] of length 2 (n + 1).
// x: [..., n] float64 -> [..., n] float64
torch::Tensor sine_transform_last(const torch::Tensor& x) {
  const int64_t n = x.size(-1);
  auto zero_shape = x.sizes().vec();
  zero_shape.back() = 1;
  const torch::Tensor zero = torch::zeros(zero_shape, x.options());
  const torch::Tensor odd = torch::cat({zero, x, zero, x.flip(-1).neg()}, -1);
  return torch::imag(torch::fft::rfft(odd, c10::nullopt, -1)).narrow(-1, 1, n);
}

/// The scaling of poisson_solve's spectrum: 1 / (4 (n+1)^2 lambda_kl), lambda
/// the eigenvalues of -Laplace_h, with the (-2)^4 of four sine transforms and
/// the (2 / (n + 1))^2 of the inverse transform folded in.
// -> [n, n] float64 on `options`' device
torch::Tensor poisson_spectrum_scale(int64_t n, const torch::TensorOptions& options) {
  const double np1 = static_cast<double>(n + 1);
  const torch::Tensor k = torch::arange(1, n + 1, options);
  const torch::Tensor s = torch::sin(k * (kPi / (2.0 * np1)));
  const torch::Tensor lam1 = 4.0 * np1 * np1 * s * s;  // 1D eigenvalues, h^-2 = (n+1)^2
  const torch::Tensor lam = lam1.unsqueeze(1) + lam1.unsqueeze(0);
  return 1.0 / (4.0 * np1 * np1 * lam);
}

// scale: poisson_spectrum_scale(n); f: [B, n, n] -> [B, n, n]
torch::Tensor poisson_solve_scaled(const torch::Tensor& f, const torch::Tensor& scale) {
  // With S the (symmetric) DST-I matrix, sine_transform_last(X) = -2 X S, so
  // transform, transpose, transform gives 4 (S f S)^T; the spectrum scale is
  // symmetric, and the same steps again give S (S f S / lambda) S, scaled.
  const torch::Tensor g = sine_transform_last(sine_transform_last(f).transpose(1, 2)) * scale;
  return sine_transform_last(sine_transform_last(g).transpose(1, 2));
}

/// The face weights of the Darcy operator, h^-2 (a_ij + a_n) / 2.
struct Stencil {
  torch::Tensor wx;  // [B, R-1, R-2]: faces between x-rows i and i+1, at interior columns
  torch::Tensor wy;  // [B, R-2, R-1]: faces between y-columns j and j+1, at interior rows
};

// a: [B, R, R] float64
Stencil make_stencil(const torch::Tensor& a) {
  const int64_t r = a.size(1);
  const double h2inv = static_cast<double>((r - 1) * (r - 1));
  const torch::Tensor ac = a.slice(2, 1, r - 1);  // interior columns [B, R, R-2]
  const torch::Tensor ar = a.slice(1, 1, r - 1);  // interior rows [B, R-2, R]
  Stencil st;
  st.wx = (ac.slice(1, 0, r - 1) + ac.slice(1, 1, r)).mul_(0.5 * h2inv).contiguous();
  st.wy = (ar.slice(2, 0, r - 1) + ar.slice(2, 1, r)).mul_(0.5 * h2inv).contiguous();
  return st;
}

// u: [B, R-2, R-2] interior values -> A u [B, R-2, R-2]
torch::Tensor apply_stencil(const Stencil& st, const torch::Tensor& u) {
  const torch::Tensor p = torch::constant_pad_nd(u, {1, 1, 1, 1});  // [B, R, R], zero boundary
  const int64_t r = p.size(1);
  const torch::Tensor pc = p.slice(2, 1, r - 1);
  const torch::Tensor pr = p.slice(1, 1, r - 1);
  const torch::Tensor gx = st.wx * (pc.slice(1, 1, r) - pc.slice(1, 0, r - 1));  // [B, R-1, R-2]
  const torch::Tensor gy = st.wy * (pr.slice(2, 1, r) - pr.slice(2, 0, r - 1));  // [B, R-2, R-1]
  torch::Tensor out = gx.slice(1, 0, r - 2) - gx.slice(1, 1, r - 1);
  out += gy.slice(2, 0, r - 2);
  out -= gy.slice(2, 1, r - 1);
  return out;
}

void check_grid(const torch::Tensor& t, const char* fn, const char* name) {
  TORCH_CHECK(t.defined() && t.dim() == 3 && t.size(1) == t.size(2) && t.size(1) >= 3, fn, ": ",
              name, " must be [B, R, R] with R >= 3, got shape ",
              t.defined() ? t.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(t.is_floating_point(), fn, ": ", name, " must be a float tensor, got ",
              t.scalar_type());
}

void check_same(const torch::Tensor& a, const torch::Tensor& b, const char* fn, const char* name) {
  TORCH_CHECK(a.sizes() == b.sizes(), fn, ": ", name, " has shape ", b.sizes(), ", a has ",
              a.sizes());
  TORCH_CHECK(a.device() == b.device(), fn, ": ", name, " is on ", b.device(), ", a on ",
              a.device());
}

}  // namespace

using darcy_detail::cosine_synthesis_last;
using darcy_detail::grf_weights;

namespace darcy_detail {

torch::Tensor cosine_synthesis_last(const torch::Tensor& c, int64_t n) {
  const int64_t k = c.size(-1);
  TORCH_CHECK(k >= 1 && k <= n && n >= 2, "cosine_synthesis_last: ", k, " coefficients for ", n,
              " points");
  torch::Tensor c2 = c.clone();
  c2.select(-1, 0).mul_(2.0);
  if (k == n) c2.select(-1, n - 1).mul_(2.0);
  // irfft (norm "forward", no 1/n) of X_k = c2_k (zero past the last given)
  // gives c2_0 + c2_{R-1} (-1)^j + 2 sum_{0<k<R-1} c_k cos(...): twice the sum wanted.
  const torch::Tensor y = torch::fft::irfft(torch::complex(c2, torch::zeros_like(c2)), 2 * (n - 1),
                                            /*dim=*/-1, "forward");
  return y.narrow(-1, 0, n).mul(0.5);
}

torch::Tensor grf_weights(int64_t modes, double alpha, double tau,
                          const torch::TensorOptions& options) {
  const auto opts = options.dtype(torch::kDouble);
  const torch::Tensor k = torch::arange(modes, opts);
  const torch::Tensor k2 = k.unsqueeze(1).square() + k.unsqueeze(0).square();
  torch::Tensor sqrt_lambda =
      std::pow(tau, alpha - 1.0) * (kPi * kPi * k2 + tau * tau).pow(-alpha / 2.0);
  torch::Tensor w =
      torch::full({modes}, std::sqrt(2.0), opts);  // phi_k = sqrt(2) cos(pi k x), phi_0 = 1
  w[0] = 1.0;
  sqrt_lambda = sqrt_lambda * w.unsqueeze(1) * w.unsqueeze(0);
  sqrt_lambda[0][0] = 0.0;  // zero mean
  return sqrt_lambda;
}

}  // namespace darcy_detail

// ---------------------------------------------------------------------------
// The random coefficient
// ---------------------------------------------------------------------------

torch::Tensor grf_noise(uint64_t seed, int64_t index, int64_t resolution) {
  TORCH_CHECK(resolution >= 1, "grf_noise: resolution must be >= 1, got ", resolution);
  TORCH_CHECK(index >= 0, "grf_noise: index must be >= 0, got ", index);
  gen::StandardNormals normal(seed, index);
  // The numbers in order, then each to its place: shell m (max(k1, k2) = m)
  // takes numbers [m^2, (m + 1)^2), first row m's k2 = 0 .. m, then column
  // m's k1 = 0 .. m - 1.
  std::vector<double> numbers(static_cast<size_t>(resolution * resolution));
  normal.fill(numbers.data(), resolution * resolution);
  torch::Tensor xi = torch::empty({resolution, resolution}, torch::kDouble);
  double* p = xi.data_ptr<double>();
  const double* q = numbers.data();
  at::parallel_for(0, resolution, 64, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const double* shell = q + m * m;
      for (int64_t j = 0; j <= m; ++j) p[m * resolution + j] = shell[j];
      for (int64_t i = 0; i < m; ++i) p[i * resolution + m] = shell[m + 1 + i];
    }
  });
  return xi;
}

torch::Tensor grf_from_noise(const torch::Tensor& xi, double alpha, double tau) {
  TORCH_CHECK(xi.defined() && xi.dim() == 3 && xi.size(1) == xi.size(2) && xi.size(1) >= 2,
              "grf_from_noise: xi must be [B, R, R] with R >= 2, got shape ",
              xi.defined() ? xi.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(alpha > 0 && tau > 0, "grf_from_noise: alpha and tau must be > 0, got alpha=", alpha,
              " tau=", tau);
  torch::NoGradGuard no_grad;
  const int64_t r = xi.size(1);
  const torch::Tensor sqrt_lambda = grf_weights(r, alpha, tau, xi.options());
  const torch::Tensor c = xi.to(torch::kDouble) * sqrt_lambda;  // [B, k1, k2]
  // As matrices, with C_jk = cos(pi k j / (R-1)): synthesis along k2 gives c C^T;
  // transposed and synthesized again, C c^T C^T = g^T.
  const torch::Tensor gt = cosine_synthesis_last(cosine_synthesis_last(c, r).transpose(1, 2), r);
  return gt.transpose(1, 2).contiguous();
}

torch::Tensor threshold_coefficient(const torch::Tensor& g, double high, double low) {
  TORCH_CHECK(g.defined() && g.is_floating_point(),
              "threshold_coefficient: g must be a float tensor");
  const auto opts = g.options().dtype(torch::kDouble);
  return torch::where(g >= 0, torch::full({}, high, opts), torch::full({}, low, opts));
}

// ---------------------------------------------------------------------------
// The finite-difference problem
// ---------------------------------------------------------------------------

torch::Tensor darcy_operator(const torch::Tensor& a, const torch::Tensor& u) {
  check_grid(a, "darcy_operator", "a");
  check_grid(u, "darcy_operator", "u");
  check_same(a, u, "darcy_operator", "u");
  torch::NoGradGuard no_grad;
  const Stencil st = make_stencil(a.to(torch::kDouble));
  return apply_stencil(st, interior(u.to(torch::kDouble)));
}

torch::Tensor poisson_solve(const torch::Tensor& f) {
  TORCH_CHECK(f.defined() && f.dim() == 3 && f.size(1) == f.size(2) && f.size(1) >= 1,
              "poisson_solve: f must be [B, n, n] with n >= 1, got shape ",
              f.defined() ? f.sizes() : torch::IntArrayRef{});
  torch::NoGradGuard no_grad;
  const torch::Tensor fd = f.to(torch::kDouble);
  return poisson_solve_scaled(fd, poisson_spectrum_scale(f.size(1), fd.options()));
}

DarcySolution solve_darcy(const torch::Tensor& a, const torch::Tensor& f,
                          const DarcySolveOptions& options) {
  check_grid(a, "solve_darcy", "a");
  check_grid(f, "solve_darcy", "f");
  check_same(a, f, "solve_darcy", "f");
  TORCH_CHECK(options.tolerance() > 0, "solve_darcy: tolerance must be > 0, got ",
              options.tolerance());
  TORCH_CHECK(options.max_iterations() >= 1, "solve_darcy: max_iterations must be >= 1, got ",
              options.max_iterations());
  torch::NoGradGuard no_grad;
  const torch::Tensor ad = a.to(torch::kDouble);
  TORCH_CHECK((ad > 0).all().item<bool>() && torch::isfinite(ad).all().item<bool>(),
              "solve_darcy: a must be positive and finite");
  const int64_t batch = a.size(0);
  const int64_t r = a.size(1);
  const int64_t n = r - 2;
  const auto bview = std::vector<int64_t>{batch, 1, 1};
  const Stencil st = make_stencil(ad);
  const torch::Tensor scale = poisson_spectrum_scale(n, ad.options());
  const double tol = options.tolerance();

  const torch::Tensor rhs = interior(f.to(torch::kDouble)).contiguous();
  torch::Tensor x = torch::zeros_like(rhs);
  torch::Tensor res_vec = rhs.clone();
  const torch::Tensor f_norm = batch_dot(rhs, rhs).sqrt();
  const torch::Tensor f_scale = torch::where(f_norm > 0, f_norm, torch::ones_like(f_norm));
  torch::Tensor rel = batch_dot(res_vec, res_vec).sqrt() / f_scale;  // [B]
  torch::Tensor active = rel > tol;
  torch::Tensor iterations = torch::zeros({batch}, ad.options().dtype(torch::kLong));
  torch::Tensor z = poisson_solve_scaled(res_vec, scale);
  torch::Tensor p = z.clone();
  torch::Tensor rz = batch_dot(res_vec, z);
  const torch::Tensor zero = torch::zeros({batch}, ad.options());
  for (int64_t it = 0;; ++it) {
    if (!active.any().item<bool>()) break;
    if (it == options.max_iterations()) {
      const double worst = torch::where(active, rel, zero).max().item<double>();
      TORCH_CHECK(false, "solve_darcy: CG did not reach the relative residual ", tol, " in ",
                  options.max_iterations(), " iterations (worst sample at ", worst, ")");
    }
    const torch::Tensor ap = apply_stencil(st, p);
    // Converged samples take no step (alpha = 0) and restart their direction
    // (beta = 0), so they stay finite and unchanged.
    const torch::Tensor alpha = torch::where(active, rz / batch_dot(p, ap), zero);
    x.addcmul_(alpha.view(bview), p);
    res_vec.addcmul_(alpha.view(bview), ap, -1.0);
    iterations += active.to(torch::kLong);
    rel = torch::where(active, batch_dot(res_vec, res_vec).sqrt() / f_scale, rel);
    active = active.logical_and(rel > tol);
    z = poisson_solve_scaled(res_vec, scale);
    const torch::Tensor rz_new = batch_dot(res_vec, z);
    const torch::Tensor beta = torch::where(active, rz_new / rz, zero);
    rz = rz_new;
    p = z.addcmul_(beta.view(bview), p);
  }
  DarcySolution sol;
  sol.u = torch::constant_pad_nd(x, {1, 1, 1, 1});
  sol.iterations = iterations.cpu();
  sol.residual = rel.cpu();
  return sol;
}

torch::Tensor darcy_residual(const torch::Tensor& a, const torch::Tensor& u,
                             const torch::Tensor& f) {
  check_grid(a, "darcy_residual", "a");
  check_grid(u, "darcy_residual", "u");
  check_grid(f, "darcy_residual", "f");
  check_same(a, u, "darcy_residual", "u");
  check_same(a, f, "darcy_residual", "f");
  torch::NoGradGuard no_grad;
  const torch::Tensor rhs = interior(f.to(torch::kDouble)).contiguous();
  const torch::Tensor diff = (rhs - darcy_operator(a, u)).contiguous();
  const torch::Tensor f_norm = batch_dot(rhs, rhs).sqrt();
  const torch::Tensor r_norm = batch_dot(diff, diff).sqrt();
  return torch::where(f_norm > 0, r_norm / f_norm, r_norm).cpu();
}

// ---------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------

void validate_darcy_options(const DarcyGenOptions& o) {
  const int64_t max_resolution = o.inputs_only() ? darcy_detail::kMaxInputsResolution : 16385;
  TORCH_CHECK_VALUE(o.resolution() >= 3, "resolution must be >= 3, got ", o.resolution());
  TORCH_CHECK_VALUE(o.resolution() <= max_resolution, "resolution must be <= ", max_resolution,
                    o.inputs_only() ? " with inputs_only" : "", ", got ", o.resolution());
  gen::check_sample_counts(o.samples(), o.test_samples());
  TORCH_CHECK_VALUE(o.subsample() >= 1, "subsample must be >= 1, got ", o.subsample());
  TORCH_CHECK_VALUE((o.resolution() - 1) % o.subsample() == 0, "subsample ", o.subsample(),
                    " does not divide resolution - 1 = ", o.resolution() - 1,
                    " (the boundary nodes must be kept)");
  TORCH_CHECK_VALUE(std::isfinite(o.alpha()) && o.alpha() > 0, "alpha must be > 0, got ",
                    o.alpha());
  TORCH_CHECK_VALUE(std::isfinite(o.tau()) && o.tau() > 0, "tau must be > 0, got ", o.tau());
  TORCH_CHECK_VALUE(std::isfinite(o.value_high()) && o.value_high() > 0,
                    "value_high must be > 0, got ", o.value_high());
  TORCH_CHECK_VALUE(std::isfinite(o.value_low()) && o.value_low() > 0,
                    "value_low must be > 0, got ", o.value_low());
  TORCH_CHECK_VALUE(std::isfinite(o.forcing()), "forcing must be finite, got ", o.forcing());
  TORCH_CHECK_VALUE(o.tolerance() > 0 && o.tolerance() < 1, "tolerance must be in (0, 1), got ",
                    o.tolerance());
  TORCH_CHECK_VALUE(o.max_iterations() >= 1, "max_iterations must be >= 1, got ",
                    o.max_iterations());
  if (o.inputs_only()) darcy_detail::validate_inputs_only(o);
  TORCH_CHECK_VALUE(o.inputs_only() || o.grf_modes() == 0,
                    "grf_modes applies to inputs_only (the solved run keeps every mode), got ",
                    o.grf_modes());
  gen::check_batch_out_device(o.batch_size(), o.out(), darcy_output_paths(o), o.device());
}

std::vector<std::string> darcy_output_paths(const DarcyGenOptions& o) {
  return gen::output_paths(o.out(), o.test_samples());
}

namespace darcy_detail {

std::vector<std::pair<std::string, std::string>> own_settings(const DarcyGenOptions& o) {
  using gen::format_number;
  return {{"alpha", format_number(o.alpha())},
          {"tau", format_number(o.tau())},
          {"value_high", format_number(o.value_high())},
          {"value_low", format_number(o.value_low())},
          {"forcing", format_number(o.forcing())},
          {"tolerance", format_number(o.tolerance())},
          {"max_iterations", std::to_string(o.max_iterations())}};
}

std::vector<Attribute> grf_attrs(const DarcyGenOptions& o) {
  using gen::number_attr;
  using gen::text_attr;
  return {
      text_attr("grf",
                "g = sum_(k != 0) tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2) xi_k phi_k, "
                "phi_k zero-Neumann cosines, k in [0, R-1]^2 (GRF.m), at the nodes"),
      number_attr("alpha", o.alpha()),
      number_attr("tau", o.tau()),
      text_attr("values", gen::format_number(o.value_high()) + " where g >= 0, " +
                              gen::format_number(o.value_low()) + " where g < 0"),
      number_attr("value_high", o.value_high()),
      number_attr("value_low", o.value_low()),
  };
}

}  // namespace darcy_detail

namespace {

/// The solved run's samples [start, start + b): the coefficients on the CPU,
/// one sample at a time (the same numbers for every batch size and device),
/// then the batch's solve on the device.
gen::GenBatch solved_batch(const DarcyGenOptions& o, const torch::Device& device, int64_t start,
                           int64_t b) {
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  std::vector<torch::Tensor> fields;
  fields.reserve(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    fields.push_back(
        grf_from_noise(grf_noise(o.seed(), start + i, r).unsqueeze(0), o.alpha(), o.tau()));
  }
  const torch::Tensor a = threshold_coefficient(torch::cat(fields), o.value_high(), o.value_low());
  const torch::Tensor a_dev = a.to(device);
  const torch::Tensor f = torch::full_like(a_dev, o.forcing());
  const DarcySolution sol = solve_darcy(
      a_dev, f, DarcySolveOptions().tolerance(o.tolerance()).max_iterations(o.max_iterations()));
  const torch::Tensor residual = darcy_residual(a_dev, sol.u, f);  // [b], CPU
  const torch::Tensor coeff = gen::every_kth(a, k, 2).to(torch::kFloat);
  const torch::Tensor u = gen::every_kth(sol.u, k, 2).to(torch::kCPU, torch::kFloat);
  TORCH_CHECK(torch::isfinite(u).all().item<bool>(), "samples ", start, "..", start + b - 1,
              ": the solution is not finite");
  return {{coeff, u}, {{"residual", residual}, {"iterations", sol.iterations}}};
}

}  // namespace

GenSummary generate_darcy(const DarcyGenOptions& o, const GenHooks& hooks) {
  validate_darcy_options(o);
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const torch::Device device = gen::resolve_device(o.device());
  if (o.inputs_only()) return darcy_detail::generate_inputs(o, hooks, device, t0);
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  const int64_t stored = (r - 1) / k + 1;
  const int64_t total = o.samples();

  gen::GenSpec spec;
  // Measured fastest on a 2-core CPU at 421^2: one sample at a time (cache).
  const int64_t batch_size = o.batch_size() > 0 ? o.batch_size() : (device.is_cuda() ? 32 : 1);
  spec.run = {"darcy", kGeneratorVersion, r,         total, o.test_samples(), o.seed(),
              k,       device.is_cuda(),  batch_size};
  spec.own = darcy_detail::own_settings(o);
  spec.out = o.out();
  spec.paths = darcy_output_paths(o);
  spec.datasets = {{"coeff", {stored, stored}}, {"sol", {stored, stored}}};
  spec.device = device;
  spec.make_batch = [&](int64_t start, int64_t b, const gen::BatchContext&) {
    return solved_batch(o, device, start, b);
  };
  const std::string fd_scheme =
      "5-point finite differences on the nodes x_i = i/(R-1), boundary included; face "
      "coefficients (a_i + a_(i+1))/2 (arithmetic, as solve_gwf.m); u = 0 on the boundary nodes";
  const std::string solver =
      "matrix-free preconditioned CG in float64, preconditioner: exact DST-I inverse of the "
      "constant-coefficient 5-point Laplacian";
  spec.attributes = [&](const gen::GenOutput& output, size_t p) {
    using gen::number_attr;
    using gen::text_attr;
    const gen::GenOutput::Part& part = output.parts()[p];
    std::vector<Attribute> attrs{
        text_attr("generator", "fno_datagen: Darcy flow of Li et al. 2020 (FNO), appendix A.3.2"),
        number_attr("generator_version", kGeneratorVersion),
        text_attr("equation", "-div(a grad u) = f on (0,1)^2, u = 0 on the boundary"),
        text_attr("layout", "coeff, sol: (sample, i, j) at (x_i, y_j), boundary nodes included"),
    };
    gen::append(attrs, gen::grid_attrs(r, k, stored));
    gen::append(attrs, gen::seed_attrs(o.seed()));
    gen::append(attrs, gen::split_attrs(part.split, part.count, part.first, total));
    gen::append(attrs, darcy_detail::grf_attrs(o));
    gen::append(attrs, {
                           number_attr("f", o.forcing()),
                           text_attr("fd_scheme", fd_scheme),
                           text_attr("solver", solver),
                           number_attr("tolerance", o.tolerance()),
                           number_attr("max_residual", output.stat_max(p, "residual")),
                           number_attr("max_cg_iterations", output.stat_max(p, "iterations")),
                           text_attr("device", device.is_cuda() ? "cuda" : "cpu"),
                           text_attr("command_line", o.command_line()),
                       });
    return attrs;
  };
  spec.summarize = [&](const gen::GenOutput& output, GenSummary& summary) {
    summary.max_residual = output.stat_max("residual");
    summary.max_iterations = static_cast<int64_t>(output.stat_max("iterations"));
    summary.mean_iterations = output.stat_sum("iterations") / static_cast<double>(total);
    char line[96];
    std::snprintf(line, sizeof line, "max_residual %.3g", summary.max_residual);
    summary.report.emplace_back(line);
    std::snprintf(line, sizeof line, "cg_iterations mean %.1f max %lld", summary.mean_iterations,
                  static_cast<long long>(summary.max_iterations));
    summary.report.emplace_back(line);
  };
  return gen::run_generator(spec, hooks, t0);
}

}  // namespace fno::data
