// The periodic 3D Poisson generator (see fno_data/poisson3d_gen.h): white
// noise, the GRF and the exact solution by real FFTs, streamed into HDF5 files
// by the batch loop every generator uses (gen_common.h).
#include <fno_data/poisson3d_gen.h>

#include <fno_data/darcy.h>

#include "gen_common.h"

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

using gen::kPi;
/// Bumped whenever the same options would give different data.
constexpr int kPoissonGeneratorVersion = 1;
/// Points per side at most: 10^9 samples x 1024^3 x 4 bytes < 2^62.
constexpr int64_t kPoissonMaxResolution = 1024;

const std::vector<int64_t> kSpatialDims{1, 2, 3};

void check_field(const torch::Tensor& t, const char* fn, const char* name) {
  TORCH_CHECK(t.defined() && t.dim() == 4 && t.size(1) >= 1 && t.size(2) >= 1 && t.size(3) >= 1, fn,
              ": ", name, " must be [B, R1, R2, R3], got shape ",
              t.defined() ? t.sizes() : torch::IntArrayRef{});
  TORCH_CHECK(t.is_floating_point(), fn, ": ", name, " must be a float tensor, got ",
              t.scalar_type());
}

/// 4 pi^2 |k|^2 on the real-FFT half grid of `grid` (integer frequencies k).
// -> [R1, R2, R3 / 2 + 1] float64
torch::Tensor laplacian_symbol(torch::IntArrayRef grid, const torch::TensorOptions& options) {
  const auto opts = options.dtype(torch::kDouble);
  const auto k1 = torch::fft::fftfreq(grid[0], 1.0 / static_cast<double>(grid[0]), opts);
  const auto k2 = torch::fft::fftfreq(grid[1], 1.0 / static_cast<double>(grid[1]), opts);
  const auto k3 = torch::fft::rfftfreq(grid[2], 1.0 / static_cast<double>(grid[2]), opts);
  const auto k_sq =
      k1.square().view({-1, 1, 1}) + k2.square().view({1, -1, 1}) + k3.square().view({1, 1, -1});
  return (4.0 * kPi * kPi) * k_sq;
}

torch::IntArrayRef grid_of(const torch::Tensor& t) { return t.sizes().slice(1); }

/// The real field of the half-grid spectrum `c` (unnormalized inverse FFT).
// c: [B, R1, R2, R3/2+1] complex -> [B, *grid] float64
torch::Tensor synthesize(const torch::Tensor& c, torch::IntArrayRef grid) {
  return torch::fft::irfftn(c, grid, kSpatialDims, "forward");
}

/// ||a - b|| / ||b|| per sample, one reduction each (the same in any batch).
// a, b: [B, ...] -> [B] float64, CPU
torch::Tensor relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  std::vector<double> out;
  for (int64_t s = 0; s < a.size(0); ++s) {
    const double nb = b[s].norm().item<double>();
    const double nd = (a[s] - b[s]).norm().item<double>();
    out.push_back(nb > 0 ? nd / nb : nd);
  }
  return torch::tensor(out, torch::kDouble);
}

struct Fields {
  torch::Tensor f;         // [B, R, R, R] float64
  torch::Tensor u;         // [B, R, R, R] float64
  torch::Tensor residual;  // [B] float64, CPU
};

/// f and u of white noise w [B, R, R, R] on its device, from one spectrum.
Fields fields_of_noise(const torch::Tensor& w, double alpha, double tau) {
  const auto grid = grid_of(w);
  const auto opts = w.options().dtype(torch::kDouble);
  const torch::Tensor zeta = torch::fft::rfftn(w, c10::nullopt, kSpatialDims, "ortho");
  const torch::Tensor f_hat = zeta * periodic_grf3d_spectrum(grid, alpha, tau, opts);
  torch::Tensor inv_symbol = laplacian_symbol(grid, opts).reciprocal();
  inv_symbol.index_put_({0, 0, 0}, 0.0);  // the zero mean
  Fields out;
  out.f = synthesize(f_hat, grid);
  out.u = synthesize(f_hat * inv_symbol, grid);
  out.residual = relative_error(periodic_neg_laplacian(out.u), out.f);
  return out;
}

}  // namespace

torch::Tensor white_noise3d(uint64_t seed, int64_t index, int64_t resolution) {
  TORCH_CHECK(resolution >= 1, "white_noise3d: resolution must be >= 1, got ", resolution);
  TORCH_CHECK(index >= 0, "white_noise3d: index must be >= 0, got ", index);
  gen::StandardNormals normal(seed, index);
  torch::Tensor w = torch::empty({resolution, resolution, resolution}, torch::kDouble);
  normal.fill(w.data_ptr<double>(), w.numel());
  return w;
}

torch::Tensor periodic_grf3d_spectrum(torch::IntArrayRef grid, double alpha, double tau,
                                      const torch::TensorOptions& options) {
  TORCH_CHECK(grid.size() == 3 && grid[0] >= 1 && grid[1] >= 1 && grid[2] >= 1,
              "periodic_grf3d_spectrum: grid must be (R1, R2, R3), got ", grid);
  TORCH_CHECK(alpha > 0 && tau > 0,
              "periodic_grf3d_spectrum: alpha and tau must be > 0, got alpha=", alpha,
              " tau=", tau);
  torch::Tensor s =
      std::pow(tau, alpha - 1.5) * (laplacian_symbol(grid, options) + tau * tau).pow(-alpha / 2.0);
  s.index_put_({0, 0, 0}, 0.0);  // zero mean
  return s;
}

torch::Tensor periodic_grf3d(const torch::Tensor& w, double alpha, double tau) {
  check_field(w, "periodic_grf3d", "w");
  torch::NoGradGuard no_grad;
  const torch::Tensor wd = w.to(torch::kDouble);
  const torch::Tensor zeta = torch::fft::rfftn(wd, c10::nullopt, kSpatialDims, "ortho");
  return synthesize(zeta * periodic_grf3d_spectrum(grid_of(wd), alpha, tau, wd.options()),
                    grid_of(wd));
}

torch::Tensor periodic_neg_laplacian(const torch::Tensor& u) {
  check_field(u, "periodic_neg_laplacian", "u");
  torch::NoGradGuard no_grad;
  const torch::Tensor ud = u.to(torch::kDouble);
  const torch::Tensor u_hat = torch::fft::rfftn(ud, c10::nullopt, kSpatialDims);
  return torch::fft::irfftn(u_hat * laplacian_symbol(grid_of(ud), ud.options()), grid_of(ud),
                            kSpatialDims);
}

torch::Tensor periodic_poisson_solve(const torch::Tensor& f) {
  check_field(f, "periodic_poisson_solve", "f");
  torch::NoGradGuard no_grad;
  const torch::Tensor fd = f.to(torch::kDouble);
  torch::Tensor inv_symbol = laplacian_symbol(grid_of(fd), fd.options()).reciprocal();
  inv_symbol.index_put_({0, 0, 0}, 0.0);
  const torch::Tensor f_hat = torch::fft::rfftn(fd, c10::nullopt, kSpatialDims);
  return torch::fft::irfftn(f_hat * inv_symbol, grid_of(fd), kSpatialDims);
}

void validate_poisson3d_options(const Poisson3dGenOptions& o) {
  TORCH_CHECK_VALUE(o.resolution() >= 4, "resolution must be >= 4, got ", o.resolution());
  TORCH_CHECK_VALUE(o.resolution() <= kPoissonMaxResolution,
                    "resolution must be <= ", kPoissonMaxResolution, ", got ", o.resolution());
  gen::check_sample_counts(o.samples(), o.test_samples());
  TORCH_CHECK_VALUE(o.subsample() >= 1, "subsample must be >= 1, got ", o.subsample());
  TORCH_CHECK_VALUE(o.resolution() % o.subsample() == 0, "subsample ", o.subsample(),
                    " does not divide resolution = ", o.resolution(),
                    " (the periodic grid must stay uniform)");
  TORCH_CHECK_VALUE(std::isfinite(o.alpha()) && o.alpha() > 0, "alpha must be > 0, got ",
                    o.alpha());
  TORCH_CHECK_VALUE(std::isfinite(o.tau()) && o.tau() > 0, "tau must be > 0, got ", o.tau());
  gen::check_batch_out_device(o.batch_size(), o.out(), poisson3d_output_paths(o), o.device());
}

std::vector<std::string> poisson3d_output_paths(const Poisson3dGenOptions& o) {
  return gen::output_paths(o.out(), o.test_samples());
}

namespace {

/// Samples [start, start + b): the white noise on the CPU, the fields on the
/// device (on the CPU one sample at a time: its numbers are then its own
/// whatever the batch).
gen::GenBatch poisson3d_batch(const Poisson3dGenOptions& o, const torch::Device& device,
                              int64_t start, int64_t b) {
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  std::vector<torch::Tensor> noise;
  noise.reserve(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) noise.push_back(white_noise3d(o.seed(), start + i, r));
  const torch::Tensor w = torch::stack(noise).to(device);
  Fields fields;
  if (device.is_cpu()) {
    std::vector<torch::Tensor> fs, us, res;
    for (int64_t i = 0; i < b; ++i) {
      Fields one = fields_of_noise(w.narrow(0, i, 1), o.alpha(), o.tau());
      fs.push_back(one.f);
      us.push_back(one.u);
      res.push_back(one.residual);
    }
    fields = {torch::cat(fs), torch::cat(us), torch::cat(res)};
  } else {
    fields = fields_of_noise(w, o.alpha(), o.tau());
  }
  const torch::Tensor f = gen::every_kth(fields.f, k, 3).to(torch::kCPU, torch::kFloat);
  const torch::Tensor u = gen::every_kth(fields.u, k, 3).to(torch::kCPU, torch::kFloat);
  TORCH_CHECK(torch::isfinite(f).all().item<bool>() && torch::isfinite(u).all().item<bool>(),
              "samples ", start, "..", start + b - 1, ": the fields are not finite");
  return {{f, u}, {{"residual", fields.residual}}};
}

}  // namespace

GenSummary generate_poisson3d(const Poisson3dGenOptions& o, const GenHooks& hooks) {
  validate_poisson3d_options(o);
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const torch::Device device = gen::resolve_device(o.device());
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  const int64_t stored = r / k;
  const int64_t total = o.samples();

  const int64_t auto_batch = std::clamp<int64_t>((int64_t{1} << 24) / (r * r * r), 1, 32);
  const int64_t batch_size =
      o.batch_size() > 0 ? o.batch_size() : (device.is_cuda() ? auto_batch : 1);
  using gen::format_number;
  gen::GenSpec spec;
  spec.run = {"poisson3d", kPoissonGeneratorVersion, r,         total, o.test_samples(), o.seed(),
              k,           device.is_cuda(),         batch_size};
  spec.own = {{"alpha", format_number(o.alpha())}, {"tau", format_number(o.tau())}};
  spec.out = o.out();
  spec.paths = poisson3d_output_paths(o);
  spec.datasets = {{"coeff", {stored, stored, stored}}, {"sol", {stored, stored, stored}}};
  spec.device = device;
  spec.make_batch = [&](int64_t start, int64_t b, const gen::BatchContext&) {
    return poisson3d_batch(o, device, start, b);
  };
  spec.attributes = [&](const gen::GenOutput& output, size_t p) {
    using gen::number_attr;
    using gen::text_attr;
    const gen::GenOutput::Part& part = output.parts()[p];
    std::vector<Attribute> attrs{
        text_attr("generator",
                  "fno_datagen --problem poisson3d: periodic 3D Poisson equation "
                  "with a Gaussian random source"),
        number_attr("generator_version", kPoissonGeneratorVersion),
        text_attr("problem", "poisson3d"),
        text_attr("equation",
                  "-Laplace(u) = f on the periodic unit cube [0,1)^3, f and u with zero mean"),
        text_attr("layout",
                  "coeff = f, sol = u: (sample, i, j, l) at (x_i, y_j, z_l) = (i, j, l) / R"),
    };
    gen::append(attrs, gen::grid_attrs(r, k, stored));
    gen::append(attrs, gen::seed_attrs(o.seed()));
    gen::append(attrs, gen::split_attrs(part.split, part.count, part.first, total));
    gen::append(
        attrs,
        {
            text_attr(
                "grf",
                "f = sum_(k != 0) tau^(alpha-3/2) (4 pi^2 |k|^2 + tau^2)^(-alpha/2) zeta_k "
                "exp(2 pi i k.x), zeta the orthonormal FFT of white noise at the grid points, "
                "k the grid's FFT frequencies"),
            number_attr("alpha", o.alpha()),
            number_attr("tau", o.tau()),
            text_attr("solver",
                      "spectral, float64: u_hat(k) = f_hat(k) / (4 pi^2 |k|^2), u_hat(0) = 0"),
            number_attr("max_residual", output.stat_max(p, "residual")),
            text_attr("device", device.is_cuda() ? "cuda" : "cpu"),
            text_attr("command_line", o.command_line()),
        });
    return attrs;
  };
  spec.summarize = [&](const gen::GenOutput& output, GenSummary& summary) {
    summary.max_residual = output.stat_max("residual");
    char line[64];
    std::snprintf(line, sizeof line, "max_residual %.3g", summary.max_residual);
    summary.report.emplace_back(line);
  };
  return gen::run_generator(spec, hooks, t0);
}

}  // namespace fno::data
