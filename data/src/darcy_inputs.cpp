// The Darcy coefficient field row band by row band (fno_data/darcy_gen.h):
// GrfRows, and generate_darcy's inputs_only run, which writes the coefficient
// alone into a dataset chunked by rows without ever holding a whole field.
#include <fno_data/darcy_gen.h>

#include "darcy_internal.h"
#include "gen_common.h"

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace fno::data {
namespace {

/// Bytes of a dataset chunk (rows of one sample), about Hdf5SampleWriter's.
constexpr int64_t kChunkBytes = int64_t{1} << 20;
/// Bytes of the float32 rows made and written at a time (a band; its float64
/// and complex temporaries take about 8 times as much).
constexpr int64_t kBandBytes = int64_t{16} << 20;
/// Bytes of the temporaries of one step of GrfRows' first pass.
constexpr int64_t kPassBytes = int64_t{512} << 20;

}  // namespace

torch::Tensor grf_coefficients(uint64_t seed, int64_t index, int64_t modes, double alpha,
                               double tau) {
  TORCH_CHECK(modes >= 1, "grf_coefficients: modes must be >= 1, got ", modes);
  TORCH_CHECK(alpha > 0 && tau > 0,
              "grf_coefficients: alpha and tau must be > 0, got alpha=", alpha, " tau=", tau);
  torch::NoGradGuard no_grad;
  const torch::Tensor xi = grf_noise(seed, index, modes);  // [K, K] float64, CPU
  return xi * darcy_detail::grf_weights(modes, alpha, tau, xi.options());
}

GrfRows::GrfRows(const torch::Tensor& c, int64_t resolution, const torch::Device& device)
    : resolution_(resolution) {
  TORCH_CHECK(c.defined() && c.dim() == 2 && c.size(0) == c.size(1) && c.size(0) >= 1,
              "GrfRows: c must be [K, K], got shape ",
              c.defined() ? c.sizes() : torch::IntArrayRef{});
  modes_ = c.size(0);
  TORCH_CHECK(resolution >= 2 && modes_ <= resolution, "GrfRows: ", modes_,
              " modes per dim for a grid of ", resolution, " nodes per side (K <= R, R >= 2)");
  torch::NoGradGuard no_grad;
  // U^T[k2, i] = sum_k1 c[k1, k2] cos(pi k1 i / (R - 1)): the synthesis of c^T
  // along its last dim (k1), a few k2 at a time to bound the temporaries.
  const torch::Tensor ct = c.to(device, torch::kDouble).t().contiguous();  // [k2, k1]
  ut_ = torch::empty({modes_, resolution}, ct.options());
  const int64_t row_bytes = 8 * (3 * modes_ + 5 * resolution);
  const int64_t step = std::max<int64_t>(1, kPassBytes / row_bytes);
  for (int64_t a = 0; a < modes_; a += step) {
    const int64_t n = std::min(step, modes_ - a);
    ut_.narrow(0, a, n).copy_(darcy_detail::cosine_synthesis_last(ct.narrow(0, a, n), resolution));
  }
}

torch::Tensor GrfRows::rows(int64_t first, int64_t count, int64_t step) const {
  TORCH_CHECK(count >= 1 && step >= 1 && first >= 0 && first + step * (count - 1) < resolution_,
              "GrfRows::rows: rows ", first, " + ", step, " x [0, ", count, ") outside [0, ",
              resolution_, ")");
  torch::NoGradGuard no_grad;
  // U's rows i = first + step m: [count, K]
  const torch::Tensor u =
      ut_.slice(1, first, first + step * (count - 1) + 1, step).t().contiguous();
  const torch::Tensor g = darcy_detail::cosine_synthesis_last(u, resolution_);  // [count, R]
  return step == 1 ? g : g.slice(1, 0, resolution_, step);
}

namespace darcy_detail {

void validate_inputs_only(const DarcyGenOptions& o) {
  TORCH_CHECK_VALUE(o.grf_modes() >= 0 && o.grf_modes() <= o.resolution(),
                    "grf_modes must be in [0, resolution] = [0, ", o.resolution(), "], got ",
                    o.grf_modes());
  TORCH_CHECK_VALUE(o.batch_size() <= 1,
                    "batch_size applies to the solve; inputs_only makes one sample at a time, got ",
                    o.batch_size());
  // The dataset's bytes, N x R'^2 x 4, must stay inside 64 bits (HDF5).
  const double stored = static_cast<double>((o.resolution() - 1) / o.subsample() + 1);
  const double bytes = static_cast<double>(o.samples()) * stored * stored * 4.0;
  TORCH_CHECK_VALUE(bytes < 0x1p62, "samples x stored grid is ", bytes,
                    " bytes of coefficients, over 2^62: fewer samples or grid points");
}

GenSummary generate_inputs(const DarcyGenOptions& o, const GenHooks& hooks,
                           const torch::Device& device, std::chrono::steady_clock::time_point t0) {
  TORCH_CHECK_VALUE(!hooks.resume, "inputs_only is not resumable (each sample is written row band ",
                    "by row band into the output file): run it without --resume");
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  const int64_t stored = (r - 1) / k + 1;
  const int64_t total = o.samples();
  const int64_t modes = o.grf_modes() > 0 ? o.grf_modes() : std::min(r, kDarcyAutoModes);
  const int64_t row_bytes = 4 * stored;
  // Chunks of about kChunkBytes, as even as the rows allow (HDF5 stores a
  // partial last chunk whole).
  const int64_t most = std::clamp<int64_t>(kChunkBytes / row_bytes, 1, stored);
  const int64_t chunks = (stored + most - 1) / most;
  const int64_t chunk_rows = (stored + chunks - 1) / chunks;
  const int64_t band_rows =
      std::min(stored, chunk_rows * std::max<int64_t>(1, kBandBytes / (chunk_rows * row_bytes)));

  gen::GenSpec spec;
  spec.run = {"darcy", kGeneratorVersion, r, total, o.test_samples(), o.seed(),
              k,       device.is_cuda(),  1};
  spec.own = own_settings(o);
  spec.own.emplace_back("inputs_only", "1");
  spec.own.emplace_back("grf_modes", std::to_string(modes));
  spec.out = o.out();
  spec.paths = darcy_output_paths(o);
  spec.datasets = {{"coeff", {stored, stored}}};
  spec.chunk_rows = chunk_rows;
  spec.device = device;
  spec.units_per_sample = stored;
  // Where the time goes (the summary's lines): drawing the field's modes and
  // their first pass, making the bands (launched, on CUDA), and handing them
  // to the writer (the copy to the host and the wait for the band before).
  double draw_seconds = 0, band_seconds = 0, write_seconds = 0;
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  spec.make_batch = [&](int64_t start, int64_t b, const gen::BatchContext& ctx) {
    for (int64_t s = start; s < start + b; ++s) {
      auto t = std::chrono::steady_clock::now();
      const GrfRows field(grf_coefficients(o.seed(), s, modes, o.alpha(), o.tau()), r, device);
      draw_seconds += since(t);
      for (int64_t row = 0; row < stored; row += band_rows) {
        ctx.check_stop(s);
        const int64_t n = std::min(band_rows, stored - row);
        t = std::chrono::steady_clock::now();
        const torch::Tensor a =
            threshold_coefficient(field.rows(row * k, n, k), o.value_high(), o.value_low())
                .to(torch::kFloat);
        band_seconds += since(t);
        t = std::chrono::steady_clock::now();
        ctx.write_rows(0, s, row, a);
        write_seconds += since(t);
        ctx.progress((s - start) * stored + row + n);
      }
    }
    return gen::GenBatch{};
  };
  spec.attributes = [&](const gen::GenOutput& output, size_t p) {
    using gen::number_attr;
    using gen::text_attr;
    const gen::GenOutput::Part& part = output.parts()[p];
    std::vector<Attribute> attrs{
        text_attr("generator", "fno_datagen: Darcy flow of Li et al. 2020 (FNO), appendix A.3.2"),
        number_attr("generator_version", kGeneratorVersion),
        text_attr("equation", "-div(a grad u) = f on (0,1)^2, u = 0 on the boundary"),
        text_attr("layout",
                  "coeff: (sample, i, j) at (x_i, y_j), boundary nodes included; "
                  "chunks of rows (1, " +
                      std::to_string(chunk_rows) + ", " + std::to_string(stored) + ")"),
        text_attr("solution",
                  "none: fno_datagen --inputs-only drew the coefficient a alone; no "
                  "solution u was computed"),
        number_attr("inputs_only", 1),
    };
    gen::append(attrs, gen::grid_attrs(r, k, stored));
    gen::append(attrs, gen::seed_attrs(o.seed()));
    gen::append(attrs, gen::split_attrs(part.split, part.count, part.first, total));
    gen::append(attrs, grf_attrs(o));
    gen::append(
        attrs,
        {
            number_attr("grf_modes", static_cast<double>(modes)),
            text_attr("grf_modes_kept",
                      modes == r ? std::string("all: the field of the solved run of this seed")
                                 : "max(k1, k2) < " + std::to_string(modes) +
                                       ": the solved field's modes less the finer ones"),
            text_attr("device", device.is_cuda() ? "cuda" : "cpu"),
            text_attr("command_line", o.command_line()),
        });
    return attrs;
  };
  spec.summarize = [&](const gen::GenOutput&, GenSummary& summary) {
    summary.report.push_back("grf_modes " + std::to_string(modes));
    char line[128];
    std::snprintf(line, sizeof line, "draw_seconds %.2f band_seconds %.2f write_seconds %.2f",
                  draw_seconds, band_seconds, write_seconds);
    summary.report.emplace_back(line);
  };
  return gen::run_generator(spec, hooks, t0);
}

}  // namespace darcy_detail
}  // namespace fno::data
