// Writes a coefficient field of the Darcy kind for prediction benchmarks on
// grids no generator solves at (65536^2): (N, S, S) float32, 12 where a smooth
// random field is >= 0 and 3 elsewhere (the two values of fno_datagen's
// sampler), made and written band by band of rows (data::Hdf5SampleWriter's
// write_rows, plain chunks), so the host never holds it whole. The smooth
// field is a sum of random low-frequency cosines, not fno_datagen's Gaussian
// random field: for timings, not for errors.
//
//   write_field --out field.h5 --resolution 65536 [--samples 1] [--seed 0] [--key coeff]
#include <fno_data/darcy.h>

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"Writes a thresholded smooth random field (N, S, S) band by band"};
  std::string out, key = "coeff";
  int64_t s = 0, n = 1, seed = 0, band = 256;
  app.add_option("--out", out, "the output HDF5 file (never written over)")->required();
  app.add_option("--resolution", s, "grid points per side")
      ->required()
      ->check(CLI::Range(8, 1 << 20));
  app.add_option("--samples", n, "samples")->check(CLI::Range(1, 1 << 20));
  app.add_option("--seed", seed, "seed");
  app.add_option("--key", key, "the dataset's name");
  app.add_option("--band", band, "rows per write")->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  try {
    torch::NoGradGuard no_grad;
    const int64_t k = 24;  // cosines
    const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{1} << 20) / (4 * s));
    fno::data::Hdf5SampleWriter w(
        out, {{key, {n, s, s}}},
        fno::data::SampleWriterOptions().compress(false).band_rows(std::min(chunk_rows, band)));
    const auto cols = torch::arange(s, torch::kDouble) / static_cast<double>(s);
    for (int64_t i = 0; i < n; ++i) {
      auto gen =
          at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed * 1000003 + i));
      const auto fx = torch::randint(-6, 7, {k}, gen, torch::kDouble) * 2 * M_PI;
      const auto fy = torch::randint(-6, 7, {k}, gen, torch::kDouble) * 2 * M_PI;
      const auto phase = torch::rand({k}, gen, torch::kDouble) * 2 * M_PI;
      const auto amp = torch::randn({k}, gen, torch::kDouble);
      // cos(fx x + fy y + phase) = Re(e^{i fx x} e^{i (fy y + phase)}): per band, a [rows, k] x [k,
      // S] product.
      const auto ey_re = torch::cos(fy.view({k, 1}) * cols.view({1, s}));
      const auto ey_im = torch::sin(fy.view({k, 1}) * cols.view({1, s}));
      for (int64_t r0 = 0; r0 < s; r0 += band) {
        const int64_t rows = std::min(band, s - r0);
        const auto x = torch::arange(r0, r0 + rows, torch::kDouble) / static_cast<double>(s);
        const auto arg = x.view({rows, 1}) * fx.view({1, k}) + phase.view({1, k});
        const auto g = torch::matmul(torch::cos(arg) * amp, ey_re) -
                       torch::matmul(torch::sin(arg) * amp, ey_im);
        const auto a = torch::where(g >= 0, 12.0, 3.0).to(torch::kFloat);
        w.write_rows(key, i, 1, r0, a.view({1, rows, s}));
      }
    }
    w.commit({});
    std::printf("wrote %s (%lld x %lld x %lld)\n", out.c_str(), static_cast<long long>(n),
                static_cast<long long>(s), static_cast<long long>(s));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_field: %s\n", e.what());
    return 3;
  }
}
