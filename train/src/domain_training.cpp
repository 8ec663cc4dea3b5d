// fno_train with distributed.domain_parallel N > 1: N ranks share each
// sample, each holding a band of rows of the first spatial dim
// (fno_train/domain.h); the W / N groups of them are data parallel. Each rank
// reads its rows alone (HDF5 by hyperslab; Navier-Stokes records too, for the
// space-time FNO-3D and the recurrent FNO-2D; benchmark sets by
// BenchmarkSet::select_rows, trainer.cpp's load_benchmark, their per-field
// statistics read from the whole files as one process does), the
// normalizers are fitted over whole samples (their sums added over the
// band's ranks), and the step is the
// engine's on the band (OffloadedStep::set_band; a recurrent rollout's every
// forward under the band, forward_backward_composite) with a global loss
// (band_rel_loss, each step's of a rollout); gradients are added over every
// rank after backward.
#include <fno/band.h>
#include <fno/losses.h>
#include <fno/tiled.h>
#include <fno_data/hdf5_slab.h>

#include "trainer_state.h"

#include <algorithm>
#include <optional>

namespace fno {

using namespace detail;

namespace {

// In place: the sum of t over `group`'s ranks, on the group's device and back.
void sum_over(dist::Group& group, torch::Tensor& t) {
  auto on = t.to(group.device()).contiguous();
  group.all_reduce_sum(on);
  t = on.to(t.device());
}

std::string domain_key(int64_t n) { return "distributed.domain_parallel: " + std::to_string(n); }

}  // namespace

// Before any rank waits for another: what no data is needed to refuse, the
// same on every rank.
void Trainer::State::check_domain_config() {
  const int64_t n = cfg.distributed.domain_parallel;
  if (n <= 1) return;
  const auto refuse = [&](const std::string& why) {
    throw ConfigError(domain_key(n) + ": " + why);
  };
  if (benchmark() && cfg.data.stream == DataStream::kOn) {
    refuse(
        "data.stream on: benchmark windows are held in memory under domain parallel (set "
        "data.stream off)");
  }
  if (cfg.training.cuda_graphs == CudaGraphs::kOn) {
    refuse(
        "training.cuda_graphs on: a step split across ranks runs eagerly (set it to auto or off)");
  }
  domain.emplace();
  // The model's structure (its layers, modes and options) at width 2: what
  // tiled execution needs of it, without the real model's weights.
  domain->proxy = FNO(FNOOptions(cfg.model).hidden_channels(2));
  if (const auto why = tiled_unsupported(domain->proxy); !why.empty()) refuse(why);
}

void Trainer::State::join_domain() {
  if (!domain) return;
  domain->mesh = make_domain_mesh(group, cfg.distributed.domain_parallel);
}

std::pair<int64_t, int64_t> Trainer::State::place_band(const std::string& file,
                                                       const std::vector<int64_t>& grid,
                                                       Band& band) const {
  const int64_t n = domain->mesh.n;
  if (const auto why = domain_unsupported(domain->proxy, grid, n); !why.empty()) {
    throw std::runtime_error(file + ": " + why + " (" + domain_key(n) + ")");
  }
  band = make_band(domain->mesh, grid[0], nullptr);
  return band_rows(grid[0], n, band.rank);
}

// This rank's rows of a data file: for HDF5 (subsample 1) read by hyperslab,
// else loaded whole and sliced. `band` becomes this rank's band of the file's
// grid; a grid the ranks cannot split is refused, alike on every rank.
data::FieldPairs Trainer::State::load_rows(const std::string& file, const data::LoadOptions& lo,
                                           Band& band) const {
  const auto place = [&](const std::vector<int64_t>& shape) {  // [N, C, *S]
    return place_band(file, std::vector<int64_t>(shape.begin() + 2, shape.end()), band);
  };
  data::FieldPairs pairs;
  if (lo.subsample() == 1 && data::detect_format(file) == data::FileFormat::kHdf5) {
    const data::Hdf5SlabReader xr(file, lo.x_key().empty() ? "coeff" : lo.x_key(), lo.x_layout());
    const data::Hdf5SlabReader yr(file, lo.y_key().empty() ? "sol" : lo.y_key(), lo.y_layout());
    const auto& xs = xr.shape();
    const auto& ys = yr.shape();
    if (xs[0] != ys[0] || !std::equal(xs.begin() + 2, xs.end(), ys.begin() + 2, ys.end())) {
      throw std::runtime_error(file + ": input " + c10::str(at::IntArrayRef(xs)) + " and output " +
                               c10::str(at::IntArrayRef(ys)) + " differ in samples or grid");
    }
    const int64_t samples = lo.n_samples() > 0 ? std::min(lo.n_samples(), xs[0]) : xs[0];
    const auto [r0, rows] = place(xs);
    pairs.x = xr.read(0, samples, r0, r0 + rows);
    pairs.y = yr.read(0, samples, r0, r0 + rows);
    return pairs;
  }
  const auto whole = data::load_darcy(file, lo);
  const auto [r0, rows] = place(whole.x.sizes().vec());
  pairs.x = whole.x.narrow(2, r0, rows).contiguous();
  pairs.y = whole.y.narrow(2, r0, rows).contiguous();
  return pairs;
}

// Navier-Stokes: this rank's rows of a file's records, as pairs (ns_pairs)
// of the grid the model runs on: (R, R, t_out) for space_time, (R, R) for
// recurrent (each step of its rollout on the band's rows). HDF5 (or .mat
// v7.3) at subsample 1 is read by hyperslab; otherwise, or when the records
// are not (N, R, R, T) with enough of them (load_ns_records says why), the
// file is loaded whole and cut.
data::FieldPairs Trainer::State::load_ns_rows(const std::string& file, int64_t n_samples,
                                              int64_t t_out, Band& band) const {
  const auto& d = cfg.data;
  const auto place = [&](int64_t rows, int64_t cols, int64_t records) {
    std::vector<int64_t> grid{rows, cols};
    if (!recurrent()) grid.push_back(t_out > 0 ? t_out : records - d.t_in);
    return place_band(file, grid, band);
  };
  const auto options = ns_load_options(d, n_samples, t_out);
  std::optional<data::Hdf5SlabReader> reader;
  if (d.subsample == 1 && data::detect_format(file) == data::FileFormat::kHdf5) {
    reader.emplace(file, options.key(), data::Layout::kGrid);
  }
  torch::Tensor u;  // [samples, the band's rows, R, T]
  const std::vector<int64_t> s = reader ? reader->shape() : std::vector<int64_t>{};  // [N, 1, *S]
  if (s.size() == 5 && s[4] >= d.t_in + std::max<int64_t>(t_out, 1)) {
    const auto [r0, rows] = place(s[2], s[3], s[4]);
    const int64_t samples = n_samples > 0 ? std::min(n_samples, s[0]) : s[0];
    u = reader->read(0, samples, r0, r0 + rows).squeeze(1);
  } else {
    const auto whole = data::load_ns_records(file, options);
    const auto [r0, rows] = place(whole.size(1), whole.size(2), whole.size(3));
    u = whole.narrow(1, r0, rows).contiguous();
  }
  return ns_pairs(u, d, t_out);
}

// model.domain_padding_auto has set model.domain_padding from the files'
// boundary conditions: the band step takes none (tiled_unsupported), so a
// non-periodic dim is refused here, alike on every rank.
void Trainer::State::check_domain_padding(const std::string& file) {
  if (!domain) return;
  domain->proxy = FNO(FNOOptions(cfg.model).hidden_channels(2));
  if (const auto why = tiled_unsupported(domain->proxy); !why.empty()) {
    throw ConfigError(file + ": model.domain_padding_auto pads a non-periodic dim, and " +
                      domain_key(cfg.distributed.domain_parallel) + " cannot: " + why +
                      " (set model.domain_padding_auto: 0)");
  }
}

// The normalizers as one process fits them on whole samples: pointwise
// statistics are over the samples alone, so a band's rows of them are its
// own, and the whole grid's are the bands' placed side by side (added over
// the ranks); per-channel ones add the bands' sums, then their squared
// deviations from the mean, in float64.
void Trainer::State::fit_domain_normalizers(const data::FieldPairs& train) {
  auto& d = *domain;
  auto& group = *d.mesh.domain;
  const auto mode = cfg.data.normalization;
  const auto fit = [&](const torch::Tensor& rows, data::UnitGaussianNormalizer& whole,
                       data::UnitGaussianNormalizer& mine) {
    whole = data::UnitGaussianNormalizer(mode);
    mine = data::UnitGaussianNormalizer(mode);
    if (mode == data::NormalizerMode::kPointwise) {
      mine.fit(rows);
      auto shape = rows.sizes().vec();
      shape[0] = 2;
      shape[2] = d.band.grid_rows;
      auto both = torch::zeros(shape, rows.options());
      both.narrow(2, d.band.row0, rows.size(2)).copy_(torch::cat({mine.mean(), mine.std()}));
      sum_over(group, both);
      whole.set_state(both.narrow(0, 0, 1).clone(), both.narrow(0, 1, 1).clone());
      return;
    }
    std::vector<int64_t> dims{0};
    for (int64_t i = 2; i < rows.dim(); ++i) dims.push_back(i);
    const auto count_here = static_cast<double>(rows.numel() / rows.size(1));
    auto sums = torch::cat(
        {rows.sum(dims, false, torch::kDouble), torch::tensor({count_here}, torch::kDouble)});
    sum_over(group, sums);
    const int64_t c = rows.size(1);
    const double count = sums[c].item<double>();
    std::vector<int64_t> stat_shape(static_cast<size_t>(rows.dim()), 1);
    stat_shape[1] = c;
    const auto mean = (sums.narrow(0, 0, c) / count).reshape(stat_shape);
    auto squares = (rows.to(torch::kDouble) - mean).pow(2).sum(dims);
    sum_over(group, squares);
    const auto sd = (squares / (count - 1)).sqrt().reshape(stat_shape);
    whole.set_state(mean.to(torch::kFloat), sd.to(torch::kFloat));
    mine.set_state(mean.to(torch::kFloat), sd.to(torch::kFloat));
  };
  if (cfg.data.encode_input) fit(train.x, in_norm, d.in_rows);
  if (cfg.data.encode_output) fit(train.y, out_norm, d.out_rows);
}

// The engine's step on this rank's band (under the offload policy's tiled
// plan, OffloadedStep::set_band), the global loss of the band (decoded first
// with training.loss_on decoded), gradients added over every rank after
// backward, fp16's skip decided alike on every rank.
void Trainer::State::build_domain_step() {
  auto& d = *domain;
  step->set_band(d.band);
  const int64_t dims = static_cast<int64_t>(cfg.model.n_modes().size());
  auto loss = band_loss(cfg.training.loss, dims, d.band);
  if (cfg.training.loss_on == LossSpace::kDecoded && d.out_rows.fitted()) {
    loss = [loss, norm = &d.out_rows](const at::Tensor& out, const at::Tensor& y) {
      return loss(norm->inverse_transform(out), norm->inverse_transform(y));
    };
  }
  if (scaler) {
    // fp16: each rank's gradients are its band's share until they are added
    // up, and the scaler's verdict must be the world's: any rank's non-finite
    // gradient skips the step, and backs the scale off, on every rank.
    scaler->set_found_inf_sum([g = group](torch::Tensor& found) { sum_over(*g, found); });
  }
  train_step = std::make_unique<TrainStep>(*step, *optimizer, loss, scaler.get());
  train_step->set_gradient_sync(grad_sync.get(), /*overlap=*/false);
}

namespace detail {

StepLoss band_loss(LossName name, int64_t d, const Band& band) {
  if (name == LossName::kH1) {
    return [h1 = H1Loss(H1LossOptions().d(d)), band](const at::Tensor& a, const at::Tensor& b) {
      return band_rel_loss(h1, band, a, b);
    };
  }
  return [l2 = LpLoss(LpLossOptions().d(d).p(2)), band](const at::Tensor& a, const at::Tensor& b) {
    return band_rel_loss(l2, band, a, b);
  };
}

// Rows [band.row0, + n) of each rank of the sample placed in the whole grid,
// on every rank of it: a few predicted samples for predictions.h5.
// t: [k, C, n, *S'] -> [k, C, band.grid_rows, *S'] on the CPU
torch::Tensor gather_rows(const Trainer::State& s, const Band& band, const torch::Tensor& t) {
  auto shape = t.sizes().vec();
  shape[2] = band.grid_rows;
  auto whole = torch::zeros(shape, t.options().device(torch::kCPU));
  whole.narrow(2, band.row0, t.size(2)).copy_(t.cpu());
  sum_over(*s.domain->mesh.domain, whole);
  return whole;
}

}  // namespace detail
}  // namespace fno
