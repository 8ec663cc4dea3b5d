// Darcy data generation (fno_data/darcy_gen.h, apps/fno_datagen): the GRF
// against a direct cosine sum and against its covariance (variance and
// correlation length), the DST-I Poisson solve, the operator against
// solve_gwf.m's matrix, the discrete residual of the CG solution, its
// independence of the batch, second-order convergence on a manufactured
// solution, and the files: values, boundary, attributes, determinism, split,
// subsampling, interrupts, option errors, the paper configs that read them.
// The periodic 3D Poisson generator: the spectral equation, a manufactured
// solution, the field's covariance, its files (determinism across batch sizes,
// split, subsampling, options, interrupts) and configs/poisson3d.yaml.
#include <fno_data/darcy.h>
#include <fno_data/darcy_gen.h>
#include <fno_data/fingerprint.h>
#include <fno_data/poisson3d_gen.h>
#include <fno_train/config.h>

#include <doctest/doctest.h>
#include <hdf5.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "golden.h"

using fno::data::DarcyGenOptions;
using fno::data::generate_darcy;
using fno::data::generate_poisson3d;
using fno::data::load_darcy;
using fno::data::Poisson3dGenOptions;
using fno::test::out_path;
using fno::test::read_bytes;

namespace {

constexpr double kPi = 3.14159265358979323846;

// [B, R, R] with the boundary ignored -> the same, boundary set to zero
torch::Tensor zero_boundary(torch::Tensor u) {
  u = u.clone();
  u.select(1, 0).zero_();
  u.select(1, u.size(1) - 1).zero_();
  u.select(2, 0).zero_();
  u.select(2, u.size(2) - 1).zero_();
  return u;
}

/// The first lag (in units of the domain, linearly interpolated) at which a
/// decreasing correlation curve rho[1], rho[2], ... falls below 1/e.
double one_over_e_lag(const std::vector<double>& rho, int64_t r) {
  const double target = std::exp(-1.0);
  double prev = 1.0;
  for (size_t lag = 1; lag < rho.size(); ++lag) {
    if (rho[lag] < target) {
      const double frac = (prev - target) / (prev - rho[lag]);
      return (static_cast<double>(lag) - 1.0 + frac) / static_cast<double>(r - 1);
    }
    prev = rho[lag];
  }
  return -1;
}

/// Empirical correlation at lag L nodes along both axes: mean(s(x) s(x+L)) /
/// sqrt(mean(s(x)^2) mean(s(x+L)^2)).
// s: [B, R, R] float64
double lag_correlation(const torch::Tensor& s, int64_t lag) {
  const int64_t r = s.size(1);
  double total = 0;
  for (int dim = 1; dim <= 2; ++dim) {
    const auto lo = s.narrow(dim, 0, r - lag);
    const auto hi = s.narrow(dim, lag, r - lag);
    total += (lo * hi).mean().item<double>() /
             std::sqrt(lo.square().mean().item<double>() * hi.square().mean().item<double>());
  }
  return total / 2;
}

double read_number_attr(const std::string& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
  double value = std::nan("");
  if (attr >= 0) {
    H5Aread(attr, H5T_NATIVE_DOUBLE, &value);
    H5Aclose(attr);
  }
  H5Fclose(file);
  return value;
}

/// Files in `dir` whose names start with `prefix`.
int count_files(const std::string& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

/// A fresh, empty directory under the test output directory.
std::string fresh_dir(const std::string& name) {
  const std::string dir = out_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("file fingerprints: size and FNV-1a of every byte, as text and back") {
  const std::string dir = fresh_dir("fingerprint");
  fno::test::write_bytes(dir + "/empty", "");
  fno::test::write_bytes(dir + "/a", "a");
  std::string big(3 << 20, 'x');  // past one read buffer
  fno::test::write_bytes(dir + "/big", big);
  using fno::data::file_fingerprint;
  CHECK(file_fingerprint(dir + "/empty").size == 0);
  CHECK(file_fingerprint(dir + "/empty").hash == 0xcbf29ce484222325ULL);  // FNV-1a's basis
  CHECK(file_fingerprint(dir + "/a").hash == 0xaf63dc4c8601ec8cULL);      // FNV-1a 64 of "a"
  const auto f = file_fingerprint(dir + "/big");
  CHECK(f.size == big.size());
  big[big.size() / 2] = 'y';  // one byte in the middle: another hash
  fno::test::write_bytes(dir + "/big", big);
  CHECK(file_fingerprint(dir + "/big") != f);
  CHECK(fno::data::to_string(f).find("3145728 bytes, fnv1a64 ") == 0);
  fno::data::FileFingerprint back;
  REQUIRE(fno::data::parse_fingerprint(fno::data::to_string(f), back));
  CHECK(back == f);
  CHECK(!fno::data::parse_fingerprint("12 bytes", back));
  CHECK_THROWS_WITH_AS(file_fingerprint(dir + "/none"), doctest::Contains("none: cannot open"),
                       std::runtime_error);
}

TEST_CASE("datagen: an output that exists is refused before any work, and kept") {
  const std::string dir = fresh_dir("datagen_exists");
  fno::test::write_bytes(dir + "/d_test.h5", "not ours");
  const auto o = DarcyGenOptions().resolution(17).samples(4).test_samples(1).seed(1).device("cpu");
  CHECK_THROWS_WITH_AS(fno::data::validate_darcy_options(DarcyGenOptions(o).out(dir + "/d.h5")),
                       doctest::Contains("d_test.h5' exists; fno_datagen writes over no file"),
                       c10::ValueError);
  CHECK_THROWS_AS(generate_darcy(DarcyGenOptions(o).out(dir + "/d.h5")), c10::ValueError);
  CHECK(read_bytes(dir + "/d_test.h5") == "not ours");
  CHECK(!std::filesystem::exists(dir + "/d_train.h5"));
  const auto p3 = Poisson3dGenOptions().resolution(8).samples(2).test_samples(1).device("cpu");
  CHECK_THROWS_AS(generate_poisson3d(Poisson3dGenOptions(p3).out(dir + "/d.h5")), c10::ValueError);
  CHECK(read_bytes(dir + "/d_test.h5") == "not ours");
}

TEST_CASE("Hdf5SampleWriter: commit writes over no file, not even one that appeared meanwhile") {
  const std::string dir = fresh_dir("writer_no_replace");
  {
    fno::data::Hdf5SampleWriter w(dir + "/d.h5", {{"x", {2, 4, 4}}});
    w.write("x", 0, torch::ones({2, 4, 4}));
    fno::test::write_bytes(dir + "/d.h5", "not ours");  // another process, during the run
    CHECK_THROWS_WITH_AS(w.commit(), doctest::Contains("d.h5: exists (it appeared while"),
                         std::runtime_error);
  }
  CHECK(read_bytes(dir + "/d.h5") == "not ours");
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.exists() ? 1 : 0;
  CHECK(files == 1);  // no temporary file left
  fno::data::Hdf5SampleWriter w(dir + "/e.h5", {{"x", {2, 4, 4}}});
  w.write("x", 0, torch::ones({2, 4, 4}));
  w.commit();
  const auto opts = fno::data::LoadOptions().x_key("x").y_key("x");
  CHECK(fno::data::load_hdf5(dir + "/e.h5", opts).x.size(0) == 2);
}

TEST_CASE("Hdf5SampleWriter: replace() renames over the file at the path, whole, at commit") {
  const std::string dir = fresh_dir("writer_replace");
  const auto opts = fno::data::LoadOptions().x_key("x").y_key("x");
  const auto replace = fno::data::SampleWriterOptions().replace(true);
  fno::test::write_bytes(dir + "/d.h5", "the old run's");
  {
    fno::data::Hdf5SampleWriter w(dir + "/d.h5", {{"x", {3, 4, 4}}}, replace);
    w.write("x", 0, torch::full({3, 4, 4}, 2.0));
    CHECK(read_bytes(dir + "/d.h5") == "the old run's");  // until the commit
    w.commit();
  }
  CHECK(
      torch::equal(fno::data::load_hdf5(dir + "/d.h5", opts).x.flatten(), torch::full({48}, 2.0f)));
  {  // destroyed before its commit (an error): the old file stays, no temporary file
    fno::data::Hdf5SampleWriter w(dir + "/d.h5", {{"x", {1, 4, 4}}}, replace);
    w.write("x", 0, torch::ones({1, 4, 4}));
  }
  CHECK(fno::data::load_hdf5(dir + "/d.h5", opts).x.size(0) == 3);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.exists() ? 1 : 0;
  CHECK(files == 1);
  // Released and joined (the domain-parallel predictors' writes), then replaced.
  fno::data::Hdf5SampleWriter w(dir + "/d.h5", {{"x", {1, 4, 4}}}, replace);
  const auto temp = w.release();
  {
    auto j = fno::data::Hdf5SampleWriter::join(temp, {"x"});
    j->write("x", 0, torch::full({1, 4, 4}, 5.0));
    j->release();
  }
  w.commit();
  CHECK(
      torch::equal(fno::data::load_hdf5(dir + "/d.h5", opts).x.flatten(), torch::full({16}, 5.0f)));
}

TEST_CASE("datagen: grf_noise is seeded per sample and shares modes across resolutions") {
  const auto a = fno::data::grf_noise(7, 3, 9);
  const auto b = fno::data::grf_noise(7, 3, 17);
  CHECK(a.sizes() == torch::IntArrayRef({9, 9}));
  CHECK(torch::equal(a, b.narrow(0, 0, 9).narrow(1, 0, 9)));
  CHECK(torch::equal(a, fno::data::grf_noise(7, 3, 9)));
  CHECK_FALSE(torch::equal(a, fno::data::grf_noise(7, 4, 9)));
  CHECK_FALSE(torch::equal(a, fno::data::grf_noise(8, 3, 9)));
  const auto big = fno::data::grf_noise(1, 0, 200);  // 40000 standard normals
  CHECK(std::abs(big.mean().item<double>()) < 0.02);
  CHECK(std::abs(big.std().item<double>() - 1.0) < 0.02);
}

TEST_CASE("datagen: grf_from_noise equals the direct Karhunen-Loeve cosine sum of GRF.m") {
  const int64_t r = 7;
  const double alpha = 2.0, tau = 3.0;
  const auto xi = torch::randn({2, r, r}, torch::kDouble);
  const auto g = fno::data::grf_from_noise(xi, alpha, tau);
  REQUIRE(g.sizes() == torch::IntArrayRef({2, r, r}));
  auto acc = xi.accessor<double, 3>();
  double max_err = 0;
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        const double x = static_cast<double>(i) / (r - 1), y = static_cast<double>(j) / (r - 1);
        double sum = 0;
        for (int64_t k1 = 0; k1 < r; ++k1) {
          for (int64_t k2 = 0; k2 < r; ++k2) {
            if (k1 == 0 && k2 == 0) continue;
            const double sqrt_lambda =
                std::pow(tau, alpha - 1) *
                std::pow(kPi * kPi * (k1 * k1 + k2 * k2) + tau * tau, -alpha / 2);
            const double phi1 = k1 == 0 ? 1.0 : std::sqrt(2.0) * std::cos(kPi * k1 * x);
            const double phi2 = k2 == 0 ? 1.0 : std::sqrt(2.0) * std::cos(kPi * k2 * y);
            sum += sqrt_lambda * acc[s][k1][k2] * phi1 * phi2;
          }
        }
        max_err = std::max(max_err, std::abs(sum - g[s][i][j].item<double>()));
      }
    }
  }
  CHECK(max_err < 1e-13);
}

// The expected values below come from the covariance of the truncated series
// at R = 65 (modes k in [0, 64]^2, mean mode dropped), averaged over the
// nodes: E mean(g^2) = 0.0870 (sigma 0.295; GRF.m's tau^(alpha-1) scale), and
// the lag at which the correlation falls to 1/e is 0.321 for g and 0.241 for
// the two-valued a (arcsine law, position by position: E sign g(x) sign g(x')
// = 2/pi asin(corr(g(x), g(x')))). For comparison, on the whole plane the
// Matern-1 kernel tau r K1(tau r) of (-Laplacian + 9)^-2 falls to 1/e at 0.55;
// the dropped mean mode and the Neumann boundary shorten it. 200 samples
// estimate each within a few per cent (measured: 0.317 and 0.232).
TEST_CASE("datagen: the coefficient has the two values and the covariance's correlation length") {
  const int64_t r = 65, n = 200;
  std::vector<torch::Tensor> fields;
  for (int64_t i = 0; i < n; ++i) {
    fields.push_back(
        fno::data::grf_from_noise(fno::data::grf_noise(11, i, r).unsqueeze(0), 2.0, 3.0));
  }
  const auto g = torch::cat(fields);
  const auto a = fno::data::threshold_coefficient(g, 12.0, 3.0);

  const auto is12 = a == 12.0, is3 = a == 3.0;
  CHECK((is12 | is3).all().item<bool>());
  const double frac12 = is12.to(torch::kDouble).mean().item<double>();
  CHECK(frac12 > 0.4);
  CHECK(frac12 < 0.6);
  // Every sample has both values (a sample of one value would be a degenerate field).
  CHECK(is12.flatten(1).any(1).all().item<bool>());
  CHECK(is3.flatten(1).any(1).all().item<bool>());

  const double var = g.square().mean().item<double>();
  CHECK(var > 0.0870 * 0.85);
  CHECK(var < 0.0870 * 1.15);

  const auto s = (a - 7.5) / 4.5;  // sign(g) as +-1
  std::vector<double> rho_g{1.0}, rho_a{1.0};
  for (int64_t lag = 1; lag < r / 2; ++lag) {
    rho_g.push_back(lag_correlation(g, lag));
    rho_a.push_back(lag_correlation(s, lag));
  }
  const double lag_g = one_over_e_lag(rho_g, r), lag_a = one_over_e_lag(rho_a, r);
  INFO("1/e lag of g: ", lag_g, ", of a: ", lag_a);
  CHECK(lag_g > 0.321 * 0.85);
  CHECK(lag_g < 0.321 * 1.15);
  CHECK(lag_a > 0.241 * 0.85);
  CHECK(lag_a < 0.241 * 1.15);
}

TEST_CASE("datagen: poisson_solve inverts the 5-point Laplacian, and darcy_operator is symmetric") {
  const int64_t n = 13, r = n + 2;
  const auto f = torch::randn({2, n, n}, torch::kDouble);
  const auto u = fno::data::poisson_solve(f);
  const auto ones = torch::ones({2, r, r}, torch::kDouble);
  const auto lap = fno::data::darcy_operator(ones, torch::constant_pad_nd(u, {1, 1, 1, 1}));
  CHECK(fno::test::rel_err(lap, f) < 1e-12);

  const auto a = 1.0 + torch::rand({2, r, r}, torch::kDouble);
  const auto v = zero_boundary(torch::randn({2, r, r}, torch::kDouble));
  const auto w = zero_boundary(torch::randn({2, r, r}, torch::kDouble));
  const auto inner = [](const torch::Tensor& p, const torch::Tensor& q) {
    return (p * q).sum().item<double>();
  };
  const double vaw =
      inner(v.slice(1, 1, r - 1).slice(2, 1, r - 1), fno::data::darcy_operator(a, w));
  const double wav =
      inner(w.slice(1, 1, r - 1).slice(2, 1, r - 1), fno::data::darcy_operator(a, v));
  CHECK(std::abs(vaw - wav) <= 1e-12 * std::abs(vaw));
  CHECK(inner(v.slice(1, 1, r - 1).slice(2, 1, r - 1), fno::data::darcy_operator(a, v)) > 0);
}

// solve_gwf.m's matrix row by row: (K-1)^2 times, at interior node (i, j), the
// sum over the 4 neighbours n of (a_ij + a_n)/2 (u_ij - u_n), with u = 0 on the
// boundary. Arithmetic (not harmonic) face averages and the (K-1)^2 scaling are
// what second-order convergence alone cannot tell apart.
TEST_CASE("datagen: darcy_operator is solve_gwf.m's 5-point matrix, entry by entry") {
  const int64_t r = 9;
  const auto a = 1.0 + 11.0 * torch::rand({2, r, r}, torch::kDouble);
  const auto u = zero_boundary(torch::randn({2, r, r}, torch::kDouble));
  const auto au = fno::data::darcy_operator(a, u);
  REQUIRE(au.sizes() == torch::IntArrayRef({2, r - 2, r - 2}));
  const auto pa = a.accessor<double, 3>();
  const auto pu = u.accessor<double, 3>();
  const double scale = static_cast<double>((r - 1) * (r - 1));
  double max_err = 0;
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t i = 1; i < r - 1; ++i) {
      for (int64_t j = 1; j < r - 1; ++j) {
        double row = 0;
        const int64_t ni[4] = {i - 1, i + 1, i, i}, nj[4] = {j, j, j - 1, j + 1};
        for (int n = 0; n < 4; ++n) {
          row += (pa[s][i][j] + pa[s][ni[n]][nj[n]]) / 2 * (pu[s][i][j] - pu[s][ni[n]][nj[n]]);
        }
        max_err = std::max(max_err, std::abs(scale * row - au[s][i - 1][j - 1].item<double>()));
      }
    }
  }
  CHECK(max_err < 1e-12 * scale);
}

TEST_CASE("datagen: the CG solution has a discrete residual <= 1e-8 relative") {
  const int64_t r = 97;
  std::vector<torch::Tensor> fields;
  for (int64_t i = 0; i < 3; ++i) {
    fields.push_back(
        fno::data::grf_from_noise(fno::data::grf_noise(5, i, r).unsqueeze(0), 2.0, 3.0));
  }
  const auto a = fno::data::threshold_coefficient(torch::cat(fields), 12.0, 3.0);
  const auto f = torch::ones_like(a);
  const auto sol = fno::data::solve_darcy(a, f);
  const auto res = fno::data::darcy_residual(a, sol.u, f);
  INFO("residuals ", res, " iterations ", sol.iterations);
  CHECK(res.max().item<double>() <= 1e-8);
  CHECK(sol.residual.max().item<double>() <= 1e-10);
  // kappa(M^-1 A) <= 12/3 = 4: CG needs about 25 iterations at any resolution.
  CHECK(sol.iterations.max().item<int64_t>() <= 40);
  CHECK(torch::isfinite(sol.u).all().item<bool>());
  CHECK((sol.u >= 0).all().item<bool>());  // maximum principle (M-matrix, f >= 0)
}

// The claim behind "the file does not depend on --batch", in float64 (the
// float32 files would hide most last-bit differences): a sample solved with
// others gives exactly the numbers it gives alone.
TEST_CASE("datagen: solve_darcy gives each sample the same float64 bits in any batch") {
  for (const int64_t r : {30, 97}) {
    std::vector<torch::Tensor> fields;
    for (int64_t i = 0; i < 5; ++i) {
      fields.push_back(
          fno::data::grf_from_noise(fno::data::grf_noise(13, i, r).unsqueeze(0), 2.0, 3.0));
    }
    const auto a = fno::data::threshold_coefficient(torch::cat(fields), 12.0, 3.0);
    const auto f = torch::ones_like(a);
    const auto all = fno::data::solve_darcy(a, f);
    for (int64_t i = 0; i < 5; ++i) {
      INFO("R ", r, " sample ", i);
      const auto one = fno::data::solve_darcy(a.narrow(0, i, 1), f.narrow(0, i, 1));
      CHECK(torch::equal(one.u[0], all.u[i]));
      CHECK(one.iterations[0].item<int64_t>() == all.iterations[i].item<int64_t>());
    }
    const auto pair = fno::data::solve_darcy(a.narrow(0, 3, 2), f.narrow(0, 3, 2));
    CHECK(torch::equal(pair.u, all.u.narrow(0, 3, 2)));
  }
}

// u* = sin(pi x) sin(pi y), a = 1 + 0.5 sin(2 pi x) cos(3 pi y),
// f = -div(a grad u*) = -(a_x u_x + a_y u_y) + 2 pi^2 a u*.
TEST_CASE("datagen: a manufactured solution converges at second order") {
  std::vector<double> errors;
  const std::vector<int64_t> sizes{17, 33, 65, 129};
  for (int64_t r : sizes) {
    const auto t = torch::linspace(0, 1, r, torch::kDouble);
    const auto x = t.view({r, 1}).expand({r, r});
    const auto y = t.view({1, r}).expand({r, r});
    const auto sx = torch::sin(kPi * x), sy = torch::sin(kPi * y);
    const auto u_exact = sx * sy;
    const auto a = 1.0 + 0.5 * torch::sin(2 * kPi * x) * torch::cos(3 * kPi * y);
    const auto a_x = kPi * torch::cos(2 * kPi * x) * torch::cos(3 * kPi * y);
    const auto a_y = -1.5 * kPi * torch::sin(2 * kPi * x) * torch::sin(3 * kPi * y);
    const auto u_x = kPi * torch::cos(kPi * x) * sy;
    const auto u_y = kPi * sx * torch::cos(kPi * y);
    const auto f = -(a_x * u_x + a_y * u_y) + 2 * kPi * kPi * a * u_exact;
    const auto sol = fno::data::solve_darcy(a.unsqueeze(0), f.unsqueeze(0),
                                            fno::data::DarcySolveOptions().tolerance(1e-13));
    errors.push_back((sol.u[0] - u_exact).abs().max().item<double>());
  }
  for (size_t i = 1; i < errors.size(); ++i) {
    const double order = std::log2(errors[i - 1] / errors[i]);
    INFO("R ", sizes[i - 1], " -> ", sizes[i], ": max error ", errors[i - 1], " -> ", errors[i],
         ", order ", order);
    CHECK(order > 1.8);
    CHECK(order < 2.2);
  }
}

TEST_CASE(
    "datagen: fno_datagen's 64x64 case: coeff in {3, 12}, sol finite, >= 0, zero on the boundary") {
  const std::string dir = fresh_dir("datagen_bar");
  const std::string path = dir + "/d.h5";
  const auto summary =
      generate_darcy(DarcyGenOptions().resolution(64).samples(4).seed(1).device("cpu").out(path));
  CHECK(summary.files == std::vector<std::string>{path});
  CHECK(summary.max_residual <= 1e-8);
  const auto pairs = load_darcy(path);  // the training loader, as fno_train reads it
  REQUIRE(pairs.x.sizes() == torch::IntArrayRef({4, 1, 64, 64}));
  REQUIRE(pairs.y.sizes() == torch::IntArrayRef({4, 1, 64, 64}));
  CHECK(((pairs.x == 3) | (pairs.x == 12)).all().item<bool>());
  CHECK((pairs.x == 3).any().item<bool>());
  CHECK((pairs.x == 12).any().item<bool>());
  const auto& y = pairs.y;
  CHECK(torch::isfinite(y).all().item<bool>());
  CHECK((y >= 0).all().item<bool>());
  CHECK((y.select(2, 0) == 0).all().item<bool>());
  CHECK((y.select(2, 63) == 0).all().item<bool>());
  CHECK((y.select(3, 0) == 0).all().item<bool>());
  CHECK((y.select(3, 63) == 0).all().item<bool>());
  // -div(a grad u) = 1 with a in [3, 12]: between the solutions for a = 12 and a = 3
  // (max 0.0737 / a on the unit square).
  const auto peak = y.flatten(1).amax(1);
  CHECK((peak > 0.0737 / 12 * 0.95).all().item<bool>());
  CHECK((peak < 0.0737 / 3 * 1.05).all().item<bool>());

  CHECK(read_number_attr(path, "resolution") == 64);
  CHECK(read_number_attr(path, "seed") == 1);
  CHECK(read_number_attr(path, "samples") == 4);
  CHECK(read_number_attr(path, "alpha") == 2);
  CHECK(read_number_attr(path, "tau") == 3);
  CHECK(read_number_attr(path, "value_high") == 12);
  CHECK(read_number_attr(path, "value_low") == 3);
  CHECK(read_number_attr(path, "f") == 1);
  CHECK(read_number_attr(path, "tolerance") == 1e-10);
  CHECK(read_number_attr(path, "max_residual") <= 1e-8);
  CHECK(read_number_attr(path, "generator_version") >= 1);
}

TEST_CASE("datagen: the same seed gives the same file, whatever the batch size") {
  const std::string dir = fresh_dir("datagen_determinism");
  const auto opts = DarcyGenOptions().resolution(33).samples(5).seed(3).device("cpu");
  generate_darcy(DarcyGenOptions(opts).batch_size(2).out(dir + "/a.h5"));
  generate_darcy(DarcyGenOptions(opts).batch_size(2).out(dir + "/b.h5"));
  CHECK(read_bytes(dir + "/a.h5") == read_bytes(dir + "/b.h5"));  // byte-identical

  generate_darcy(DarcyGenOptions(opts).batch_size(1).out(dir + "/c.h5"));
  generate_darcy(DarcyGenOptions(opts).batch_size(5).out(dir + "/d.h5"));
  CHECK(read_bytes(dir + "/a.h5") == read_bytes(dir + "/c.h5"));
  CHECK(read_bytes(dir + "/a.h5") == read_bytes(dir + "/d.h5"));
  const auto a = load_darcy(dir + "/a.h5");
  const auto d = load_darcy(dir + "/d.h5");
  CHECK(torch::equal(a.x, d.x));
  CHECK(torch::equal(a.y, d.y));
  generate_darcy(DarcyGenOptions(opts).seed(4).out(dir + "/e.h5"));
  CHECK_FALSE(torch::equal(a.x, load_darcy(dir + "/e.h5").x));
}

TEST_CASE("datagen: a train/test split and subsampling keep the samples of the full run") {
  const std::string dir = fresh_dir("datagen_split");
  const auto opts = DarcyGenOptions().resolution(41).samples(6).seed(9).device("cpu");
  generate_darcy(DarcyGenOptions(opts).out(dir + "/full.h5"));
  const auto summary =
      generate_darcy(DarcyGenOptions(opts).test_samples(2).subsample(4).out(dir + "/s.h5"));
  CHECK(summary.files == std::vector<std::string>{dir + "/s_train.h5", dir + "/s_test.h5"});
  const auto full = load_darcy(dir + "/full.h5");
  const auto train = load_darcy(dir + "/s_train.h5");
  const auto test = load_darcy(dir + "/s_test.h5");
  REQUIRE(train.x.sizes() == torch::IntArrayRef({4, 1, 11, 11}));
  REQUIRE(test.x.sizes() == torch::IntArrayRef({2, 1, 11, 11}));
  const auto every4 = [](const torch::Tensor& t) {
    return t.slice(2, 0, t.size(2), 4).slice(3, 0, t.size(3), 4);
  };
  CHECK(torch::equal(train.x, every4(full.x.narrow(0, 0, 4))));
  CHECK(torch::equal(train.y, every4(full.y.narrow(0, 0, 4))));
  CHECK(torch::equal(test.x, every4(full.x.narrow(0, 4, 2))));
  CHECK(torch::equal(test.y, every4(full.y.narrow(0, 4, 2))));
  CHECK(read_number_attr(dir + "/s_test.h5", "first_sample") == 4);
  CHECK(read_number_attr(dir + "/s_test.h5", "stored_resolution") == 11);
  CHECK(read_number_attr(dir + "/s_train.h5", "subsample") == 4);
}

TEST_CASE("datagen: a stopped run leaves no output and no temporary file") {
  const std::string dir = fresh_dir("datagen_stop");
  int polls = 0;
  fno::data::GenHooks hooks;
  hooks.stop_requested = [&] { return ++polls >= 3 ? 2 : 0; };  // SIGINT before the 3rd batch
  const auto opts = DarcyGenOptions().resolution(17).samples(8).batch_size(2).seed(1).device("cpu");
  bool stopped = false;
  try {
    generate_darcy(DarcyGenOptions(opts).test_samples(3).out(dir + "/x.h5"), hooks);
  } catch (const fno::data::DatagenInterrupted& e) {
    stopped = true;
    CHECK(e.signal() == 2);
    CHECK(std::string(e.what()).find("SIGINT after 4 of 8") != std::string::npos);
  }
  CHECK(stopped);
  CHECK(count_files(dir, "") == 0);

  // Stopped after the last batch, before the files appear: still nothing.
  polls = 0;
  hooks.stop_requested = [&] { return ++polls >= 5 ? 15 : 0; };
  CHECK_THROWS_AS(generate_darcy(DarcyGenOptions(opts).out(dir + "/y.h5"), hooks),
                  fno::data::DatagenInterrupted);
  CHECK(count_files(dir, "") == 0);

  // An unwritable output fails before any work, naming the path.
  CHECK_THROWS_WITH_AS(generate_darcy(DarcyGenOptions(opts).out(dir + "/no/such/dir.h5")),
                       doctest::Contains("no/such/dir.h5"), std::runtime_error);
}

TEST_CASE("datagen: bad options are refused naming the option and the value") {
  const auto base = DarcyGenOptions().resolution(64).samples(4).seed(1).device("cpu").out("d.h5");
  const auto refused = [](const DarcyGenOptions& o, const std::string& expected) {
    try {
      fno::data::validate_darcy_options(o);
      FAIL("accepted, expected: ", expected);
    } catch (const c10::ValueError& e) {
      const std::string msg = e.what_without_backtrace();
      INFO(msg);
      CHECK(msg.find(expected) != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
  };
  refused(DarcyGenOptions(base).resolution(2), "resolution must be >= 3, got 2");
  refused(DarcyGenOptions(base).samples(0), "samples must be >= 1, got 0");
  refused(DarcyGenOptions(base).samples(int64_t{1} << 52),
          "samples must be <= 1000000000, got 4503599627370496");
  refused(DarcyGenOptions(base).test_samples(4),
          "test_samples must be in [0, samples - 1] = [0, 3], got 4");
  refused(DarcyGenOptions(base).subsample(5), "subsample 5 does not divide resolution - 1 = 63");
  refused(DarcyGenOptions(base).tolerance(0), "tolerance must be in (0, 1), got 0");
  refused(DarcyGenOptions(base).device("tpu"), "device 'tpu'");
  refused(DarcyGenOptions(base).device("cpu:1"), "device 'cpu:1'");
  const std::string dir = fresh_dir("datagen_options");
  refused(DarcyGenOptions(base).out(dir), "out: '" + dir + "' is a directory");
  std::filesystem::create_directories(dir + "/d_test.h5");
  refused(DarcyGenOptions(base).test_samples(1).out(dir + "/d.h5"),
          "out: '" + dir + "/d_test.h5' is a directory");
  refused(DarcyGenOptions(base).out(""), "out: no output file given");
  CHECK_NOTHROW(fno::data::validate_darcy_options(base));
  CHECK(fno::data::darcy_output_paths(DarcyGenOptions(base).test_samples(1).out("dir.x/d")) ==
        std::vector<std::string>{"dir.x/d_train.h5", "dir.x/d_test.h5"});
}

// configs/darcy_paper_s*.yaml load in fno_train's schema with the paper's
// setting, and read the files that their fno_datagen command line writes.
TEST_CASE("datagen: the paper configs load and name the files fno_datagen writes") {
  for (const int64_t s : {85, 141, 211, 421}) {
    const std::string name = "darcy_s" + std::to_string(s);
    INFO(name);
    const auto cfg = fno::load_config(std::string(FNO_SOURCE_DIR) + "/configs/darcy_paper_s" +
                                      std::to_string(s) + ".yaml");
    const auto paths =
        fno::data::darcy_output_paths(DarcyGenOptions().samples(1200).test_samples(200).out(
            "data/darcy/generated/" + name + ".h5"));
    REQUIRE(paths.size() == 2);
    const auto ends_with = [](const std::string& text, const std::string& tail) {
      return text.size() >= tail.size() &&
             text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
    };
    CHECK(ends_with(cfg.data.train_file, paths[0]));
    REQUIRE(cfg.data.tests.size() == 1);
    CHECK(ends_with(cfg.data.tests[0].file, paths[1]));
    CHECK(cfg.data.tests[0].name == std::to_string(s));
    CHECK(cfg.data.tests[0].n_samples == 200);
    CHECK(cfg.data.n_train == 1000);
    CHECK(cfg.data.subsample == 1);  // the files are stored at s already
    CHECK(cfg.data.batch_size == 20);
    CHECK(cfg.training.epochs == 500);
    CHECK(cfg.optimizer.lr == doctest::Approx(1e-3));
    CHECK(cfg.scheduler.name == fno::SchedulerName::kStep);
    CHECK(cfg.scheduler.step_size == 100);
    CHECK(cfg.scheduler.gamma == doctest::Approx(0.5));
    CHECK(cfg.training.loss == fno::LossName::kL2);
    CHECK(cfg.model.n_layers() == 4);
    CHECK(cfg.model.hidden_channels() == 32);
  }
}

// Runs where CUDA is (the GPU machine runs fno_tests too); passes trivially elsewhere.
TEST_CASE("datagen: on CUDA, the CPU's coefficients and solutions, whatever the batch size") {
  if (!torch::cuda::is_available()) {
    MESSAGE("no CUDA device: the CUDA solve is not checked here");
    return;
  }
  const std::string dir = fresh_dir("datagen_cuda");
  const auto opts = DarcyGenOptions().resolution(65).samples(5).seed(21);
  generate_darcy(DarcyGenOptions(opts).device("cpu").out(dir + "/cpu.h5"));
  generate_darcy(DarcyGenOptions(opts).device("cuda").batch_size(5).out(dir + "/cuda5.h5"));
  generate_darcy(DarcyGenOptions(opts).device("cuda").batch_size(2).out(dir + "/cuda2.h5"));
  const auto cpu = load_darcy(dir + "/cpu.h5");
  const auto cuda = load_darcy(dir + "/cuda5.h5");
  CHECK(torch::equal(cpu.x, cuda.x));  // the coefficients come from the CPU either way
  CHECK(fno::test::rel_err(cuda.y, cpu.y) < 1e-6);
  CHECK(read_number_attr(dir + "/cuda5.h5", "max_residual") <= 1e-8);
  CHECK(read_bytes(dir + "/cuda5.h5") == read_bytes(dir + "/cuda2.h5"));
}

// ---------------------------------------------------------------------------
// The periodic 3D Poisson problem (fno_data/poisson3d_gen.h)
// ---------------------------------------------------------------------------

TEST_CASE("poisson3d datagen: u solves -Laplace(u) = f spectrally, and f has zero mean") {
  const int64_t r = 16;
  std::vector<torch::Tensor> noise;
  for (int64_t i = 0; i < 3; ++i) noise.push_back(fno::data::white_noise3d(5, i, r));
  const auto f = fno::data::periodic_grf3d(torch::stack(noise), 2.5, 3.0);
  REQUIRE(f.sizes() == torch::IntArrayRef({3, r, r, r}));
  CHECK((f.scalar_type() == torch::kDouble));
  const auto u = fno::data::periodic_poisson_solve(f);
  const auto lap = fno::data::periodic_neg_laplacian(u);
  CHECK(fno::test::rel_err(lap, f) < 1e-12);
  for (int64_t s = 0; s < 3; ++s) {
    CHECK(std::abs(f[s].mean().item<double>()) < 1e-15 * f[s].abs().max().item<double>() * r);
    CHECK(std::abs(u[s].mean().item<double>()) < 1e-15 * u[s].abs().max().item<double>() * r);
    CHECK(f[s].std().item<double>() > 0.01);
  }
}

// u = sin(2 pi x) cos(4 pi y) sin(6 pi z) + cos(2 pi z): -Laplace(u) =
// 4 pi^2 (14 sin(2 pi x) cos(4 pi y) sin(6 pi z) + cos(2 pi z)), on a non-cubic grid.
TEST_CASE("poisson3d datagen: the spectral solve and Laplacian on a manufactured solution") {
  const int64_t r1 = 8, r2 = 12, r3 = 16;
  const auto grid = [](int64_t r) { return torch::arange(r, torch::kDouble) / r; };
  const auto x = grid(r1).view({r1, 1, 1}), y = grid(r2).view({1, r2, 1}),
             z = grid(r3).view({1, 1, r3});
  const auto a = torch::sin(2 * kPi * x) * torch::cos(4 * kPi * y) * torch::sin(6 * kPi * z);
  const auto b = torch::cos(2 * kPi * z).expand({r1, r2, r3});
  const auto u = (a + b).unsqueeze(0);
  const auto f = (4 * kPi * kPi * (14 * a + b)).unsqueeze(0);
  CHECK(fno::test::rel_err(fno::data::periodic_neg_laplacian(u), f) < 1e-13);
  CHECK(fno::test::rel_err(fno::data::periodic_poisson_solve(f), u) < 1e-13);
  // A constant has no solution: it is dropped.
  CHECK(fno::data::periodic_poisson_solve(f + 7.0).sub(u).abs().max().item<double>() < 1e-13);
}

// The field's covariance on the grid is C(lag) = sum_k mu_k exp(2 pi i k.lag/R),
// the inverse real FFT of mu = sqrt_mu^2; its variance C(0). 100 samples at 16^3
// estimate C(0) and C at lags 1..4 along each axis within a few per cent.
TEST_CASE(
    "poisson3d datagen: the field has the covariance tau^(2 alpha - 3) (-Laplace + tau^2)^-alpha") {
  const int64_t r = 16, n = 100;
  std::vector<torch::Tensor> noise;
  for (int64_t i = 0; i < n; ++i) noise.push_back(fno::data::white_noise3d(11, i, r));
  const auto f = fno::data::periodic_grf3d(torch::stack(noise), 2.5, 3.0);
  const auto sqrt_mu =
      fno::data::periodic_grf3d_spectrum({r, r, r}, 2.5, 3.0, torch::TensorOptions(torch::kDouble));
  const auto cov = torch::fft::irfftn(sqrt_mu.square(), {r, r, r}, {0, 1, 2}, "forward");
  const double c0 = cov[0][0][0].item<double>();
  INFO("variance ", c0);
  CHECK(c0 > 0.004);  // sigma about 0.07
  CHECK(c0 < 0.008);
  CHECK(f.square().mean().item<double>() == doctest::Approx(c0).epsilon(0.1));
  for (int64_t lag = 1; lag <= 4; ++lag) {
    for (int64_t dim = 1; dim <= 3; ++dim) {
      const double expected = (dim == 1   ? cov[lag][0][0]
                               : dim == 2 ? cov[0][lag][0]
                                          : cov[0][0][lag])
                                  .item<double>();
      const double got = (f * f.roll(-lag, dim)).mean().item<double>();
      INFO("lag ", lag, " dim ", dim, ": ", got, " expected ", expected);
      CHECK(std::abs(got - expected) < 0.1 * c0);
    }
  }
}

TEST_CASE("poisson3d datagen: the files hold f and u (N, R, R, R) with their attributes") {
  const std::string dir = fresh_dir("poisson3d_files");
  const std::string path = dir + "/p.h5";
  const auto summary = generate_poisson3d(
      Poisson3dGenOptions().resolution(16).samples(3).seed(2).device("cpu").out(path));
  CHECK(summary.files == std::vector<std::string>{path});
  CHECK(summary.samples == 3);
  CHECK(summary.max_residual < 1e-12);
  const auto pairs = load_darcy(path);  // the training loader, as fno_train reads it
  REQUIRE(pairs.x.sizes() == torch::IntArrayRef({3, 1, 16, 16, 16}));
  REQUIRE(pairs.y.sizes() == torch::IntArrayRef({3, 1, 16, 16, 16}));
  // The float32 fields satisfy the spectral equation to their rounding.
  const auto f = pairs.x.squeeze(1).to(torch::kDouble);
  const auto u = pairs.y.squeeze(1).to(torch::kDouble);
  const double err = fno::test::rel_err(fno::data::periodic_neg_laplacian(u), f);
  INFO("relative error of -Laplace(u) against f in float32: ", err);
  CHECK(err < 1e-5);
  for (int64_t s = 0; s < 3; ++s) {
    CHECK(std::abs(f[s].mean().item<double>()) < 1e-6 * f[s].abs().max().item<double>());
  }
  // Sample i is white_noise3d(seed, i) through the GRF and the solve.
  const auto f1 =
      fno::data::periodic_grf3d(fno::data::white_noise3d(2, 1, 16).unsqueeze(0), 2.5, 3.0);
  CHECK(torch::equal(pairs.x[1][0], f1[0].to(torch::kFloat)));
  // (u comes from f's spectrum directly, not from f: equal to round-off)
  CHECK(fno::test::rel_err(pairs.y[1][0].to(torch::kDouble),
                           fno::data::periodic_poisson_solve(f1)[0]) < 1e-6);

  CHECK(read_number_attr(path, "resolution") == 16);
  CHECK(read_number_attr(path, "stored_resolution") == 16);
  CHECK(read_number_attr(path, "seed") == 2);
  CHECK(read_number_attr(path, "samples") == 3);
  CHECK(read_number_attr(path, "alpha") == 2.5);
  CHECK(read_number_attr(path, "tau") == 3);
  CHECK(read_number_attr(path, "max_residual") < 1e-12);
  CHECK(read_number_attr(path, "generator_version") >= 1);
}

TEST_CASE("poisson3d datagen: the same seed gives the same file, whatever the batch size") {
  const std::string dir = fresh_dir("poisson3d_determinism");
  const auto opts = Poisson3dGenOptions().resolution(8).samples(5).seed(3).device("cpu");
  generate_poisson3d(Poisson3dGenOptions(opts).out(dir + "/a.h5"));
  generate_poisson3d(Poisson3dGenOptions(opts).batch_size(2).out(dir + "/b.h5"));
  generate_poisson3d(Poisson3dGenOptions(opts).batch_size(5).out(dir + "/c.h5"));
  CHECK(read_bytes(dir + "/a.h5") == read_bytes(dir + "/b.h5"));  // byte-identical
  CHECK(read_bytes(dir + "/a.h5") == read_bytes(dir + "/c.h5"));
  // Sample i alone (a run of i + 1 samples ends with it) is the same sample.
  generate_poisson3d(Poisson3dGenOptions(opts).samples(4).batch_size(3).out(dir + "/d.h5"));
  const auto a = load_darcy(dir + "/a.h5");
  const auto d = load_darcy(dir + "/d.h5");
  CHECK(torch::equal(a.x.narrow(0, 0, 4), d.x));
  CHECK(torch::equal(a.y.narrow(0, 0, 4), d.y));
  generate_poisson3d(Poisson3dGenOptions(opts).seed(4).out(dir + "/e.h5"));
  CHECK_FALSE(torch::equal(a.x, load_darcy(dir + "/e.h5").x));
}

TEST_CASE(
    "poisson3d datagen: a train/test split and subsampling keep the samples of the full run") {
  const std::string dir = fresh_dir("poisson3d_split");
  const auto opts = Poisson3dGenOptions().resolution(12).samples(5).seed(9).device("cpu");
  generate_poisson3d(Poisson3dGenOptions(opts).out(dir + "/full.h5"));
  const auto summary =
      generate_poisson3d(Poisson3dGenOptions(opts).test_samples(2).subsample(3).out(dir + "/s.h5"));
  CHECK(summary.files == std::vector<std::string>{dir + "/s_train.h5", dir + "/s_test.h5"});
  const auto full = load_darcy(dir + "/full.h5");
  const auto train = load_darcy(dir + "/s_train.h5");
  const auto test = load_darcy(dir + "/s_test.h5");
  REQUIRE(train.x.sizes() == torch::IntArrayRef({3, 1, 4, 4, 4}));
  REQUIRE(test.y.sizes() == torch::IntArrayRef({2, 1, 4, 4, 4}));
  const auto every3 = [](const torch::Tensor& t) {
    return t.slice(2, 0, t.size(2), 3).slice(3, 0, t.size(3), 3).slice(4, 0, t.size(4), 3);
  };
  CHECK(torch::equal(train.x, every3(full.x.narrow(0, 0, 3))));
  CHECK(torch::equal(train.y, every3(full.y.narrow(0, 0, 3))));
  CHECK(torch::equal(test.x, every3(full.x.narrow(0, 3, 2))));
  CHECK(torch::equal(test.y, every3(full.y.narrow(0, 3, 2))));
  // The loader's subsampling of the full file gives the same numbers.
  CHECK(torch::equal(load_darcy(dir + "/full.h5", fno::data::LoadOptions().subsample(3)).y,
                     every3(full.y)));
  CHECK(read_number_attr(dir + "/s_test.h5", "first_sample") == 3);
  CHECK(read_number_attr(dir + "/s_test.h5", "stored_resolution") == 4);
  CHECK(read_number_attr(dir + "/s_train.h5", "subsample") == 3);
}

TEST_CASE("poisson3d datagen: a stopped run leaves no output and no temporary file") {
  const std::string dir = fresh_dir("poisson3d_stop");
  int polls = 0;
  fno::data::GenHooks hooks;
  hooks.stop_requested = [&] { return ++polls >= 2 ? 15 : 0; };  // SIGTERM before the 2nd batch
  bool stopped = false;
  try {
    generate_poisson3d(Poisson3dGenOptions()
                           .resolution(8)
                           .samples(6)
                           .batch_size(2)
                           .device("cpu")
                           .test_samples(2)
                           .out(dir + "/x.h5"),
                       hooks);
  } catch (const fno::data::DatagenInterrupted& e) {
    stopped = true;
    CHECK(e.signal() == 15);
    CHECK(std::string(e.what()).find("SIGTERM after 2 of 6") != std::string::npos);
  }
  CHECK(stopped);
  CHECK(count_files(dir, "") == 0);
}

TEST_CASE("poisson3d datagen: bad options are refused naming the option and the value") {
  const auto base =
      Poisson3dGenOptions().resolution(16).samples(4).seed(1).device("cpu").out("p.h5");
  const auto refused = [](const Poisson3dGenOptions& o, const std::string& expected) {
    try {
      fno::data::validate_poisson3d_options(o);
      FAIL("accepted, expected: ", expected);
    } catch (const c10::ValueError& e) {
      const std::string msg = e.what_without_backtrace();
      INFO(msg);
      CHECK(msg.find(expected) != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
  };
  refused(Poisson3dGenOptions(base).resolution(3), "resolution must be >= 4, got 3");
  refused(Poisson3dGenOptions(base).resolution(1025), "resolution must be <= 1024, got 1025");
  refused(Poisson3dGenOptions(base).samples(0), "samples must be >= 1, got 0");
  refused(Poisson3dGenOptions(base).test_samples(4),
          "test_samples must be in [0, samples - 1] = [0, 3], got 4");
  refused(Poisson3dGenOptions(base).subsample(3), "subsample 3 does not divide resolution = 16");
  refused(Poisson3dGenOptions(base).alpha(0), "alpha must be > 0, got 0");
  refused(Poisson3dGenOptions(base).batch_size(-1), "batch_size must be >= 0");
  refused(Poisson3dGenOptions(base).device("tpu"), "device 'tpu'");
  refused(Poisson3dGenOptions(base).out(""), "out: no output file given");
  CHECK_NOTHROW(fno::data::validate_poisson3d_options(base));
  CHECK_NOTHROW(fno::data::validate_poisson3d_options(Poisson3dGenOptions(base).resolution(4)));
  CHECK(fno::data::poisson3d_output_paths(Poisson3dGenOptions(base).test_samples(1)) ==
        std::vector<std::string>{"p_train.h5", "p_test.h5"});
}

// configs/poisson3d.yaml: a 3D model, and the files its fno_datagen command writes.
TEST_CASE(
    "poisson3d datagen: configs/poisson3d.yaml is 3D and names the files fno_datagen writes") {
  const auto cfg = fno::load_config(std::string(FNO_SOURCE_DIR) + "/configs/poisson3d.yaml");
  CHECK(cfg.model.n_modes().size() == 3);
  CHECK(cfg.model.hidden_channels() == 32);
  const auto paths =
      fno::data::poisson3d_output_paths(Poisson3dGenOptions().samples(1200).test_samples(200).out(
          "data/darcy/generated/poisson3d_32.h5"));
  REQUIRE(paths.size() == 2);
  const auto ends_with = [](const std::string& text, const std::string& tail) {
    return text.size() >= tail.size() &&
           text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
  };
  CHECK(ends_with(cfg.data.train_file, paths[0]));
  REQUIRE(cfg.data.tests.size() == 1);
  CHECK(ends_with(cfg.data.tests[0].file, paths[1]));
  CHECK(cfg.data.n_train == 1000);
  CHECK(cfg.data.tests[0].n_samples == 200);
}

// Runs where CUDA is (the GPU machine runs fno_tests too); passes trivially elsewhere.
TEST_CASE("poisson3d datagen: on CUDA, the CPU's fields to round-off, whatever the batch size") {
  if (!torch::cuda::is_available()) {
    MESSAGE("no CUDA device: the CUDA generator is not checked here");
    return;
  }
  const std::string dir = fresh_dir("poisson3d_cuda");
  const auto opts = Poisson3dGenOptions().resolution(16).samples(5).seed(21);
  generate_poisson3d(Poisson3dGenOptions(opts).device("cpu").out(dir + "/cpu.h5"));
  generate_poisson3d(Poisson3dGenOptions(opts).device("cuda").batch_size(5).out(dir + "/cuda5.h5"));
  generate_poisson3d(Poisson3dGenOptions(opts).device("cuda").batch_size(2).out(dir + "/cuda2.h5"));
  const auto cpu = load_darcy(dir + "/cpu.h5");
  const auto cuda5 = load_darcy(dir + "/cuda5.h5");
  const auto cuda2 = load_darcy(dir + "/cuda2.h5");
  CHECK(fno::test::rel_err(cuda5.x, cpu.x) < 1e-6);
  CHECK(fno::test::rel_err(cuda5.y, cpu.y) < 1e-6);
  CHECK(fno::test::rel_err(cuda2.y, cuda5.y) < 1e-6);
  CHECK(read_number_attr(dir + "/cuda5.h5", "max_residual") < 1e-12);
}
