// Benchmark data's shared pieces (benchmark_run.h).
#include "benchmark_run.h"

#include "config_builder.h"

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>

namespace fno::detail {

data::BenchmarkOptions benchmark_options(const DataConfig& d, const std::string& split,
                                         int64_t n_trajectories) {
  const auto format = d.format == DataFormat::kWell       ? data::BenchmarkFormat::kWell
                      : d.format == DataFormat::kPdeBench ? data::BenchmarkFormat::kPdeBench
                                                          : data::BenchmarkFormat::kPdeArena;
  return data::BenchmarkOptions()
      .format(format)
      .split(split)
      .fields(d.fields)
      .target_fields(d.target_fields)
      .history(d.history)
      .horizon(d.horizon)
      .n_trajectories(n_trajectories)
      .subsample(d.subsample)
      .scalars(d.scalars);
}

torch::Tensor BenchmarkMetric::operator()(const torch::Tensor& pred,
                                          const torch::Tensor& target) const {
  if (!band.split()) return pdebench ? data::nrmse(pred, target) : data::vrmse(pred, target);
  // [B, C, n, *S'] -> per sample and channel, the band's sums [4, B, C] in
  // float64: squared error, target, target squared, points; then the grid's.
  const auto p = pred.flatten(2).to(device, torch::kDouble);
  const auto t = target.flatten(2).to(device, torch::kDouble);
  auto sums = torch::stack({(p - t).pow(2).sum(2), t.sum(2), t.pow(2).sum(2),
                            torch::full_like(t.select(2, 0), static_cast<double>(t.size(2)))});
  band.sum(sums);
  band.drain();
  sums = sums.to(pred.device());
  const auto err = sums[0], sum = sums[1], squares = sums[2], points = sums[3];
  const auto mse = err / points;
  if (pdebench) return (mse.sqrt() / (squares / points).sqrt()).to(pred.scalar_type());
  // data::vrmse's unbiased variance, from the sums
  const auto var = (squares - sum * sum / points) / (points - 1);
  return (mse / (var + 1e-7)).sqrt().to(pred.scalar_type());
}

BenchmarkMetric benchmark_metric(DataFormat format) {
  BenchmarkMetric m;
  m.pdebench = format == DataFormat::kPdeBench;
  return m;
}

torch::Tensor window_error_sums(const BenchmarkMetric& metric, const torch::Tensor& out,
                                const torch::Tensor& y, int64_t horizon) {
  const int64_t b = out.size(0), n_out = out.size(1) / horizon;
  // [b, f * F, *S] -> [b * f, F, *S] -> metric [b * f, F] -> [F]
  auto steps = [&](const torch::Tensor& t) {
    return t.flatten(0, 1).unflatten(0, {b * horizon, n_out});
  };
  return metric(steps(out), steps(y)).to(torch::kDouble).sum(0);
}

bool can_roll_out(const data::BenchmarkSet& set) {
  const auto& out = set.target_field_channels();
  const auto& in = set.input_field_channels();
  return set.n_time_varying_inputs() == static_cast<int64_t>(out.size()) &&
         std::equal(out.begin(), out.end(), in.begin());
}

std::pair<torch::Tensor, torch::Tensor> roll_out(const data::BenchmarkSet& set, int64_t n,
                                                 const WindowStep& step) {
  const int64_t h = set.options().history(), f = set.options().horizon();
  const auto n_out = static_cast<int64_t>(set.target_field_channels().size());
  const auto truth = set.read_steps(n, 0, set.n_steps(), false);  // [T, F, *S]
  const auto constant = set.read_constant(n);                     // [F_const + scalars, *S]
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < h; ++t) steps.push_back(truth[t]);
  while (static_cast<int64_t>(steps.size()) < truth.size(0)) {
    std::vector<torch::Tensor> window(steps.end() - h, steps.end());
    window.push_back(constant);
    const auto x = torch::cat(window).unsqueeze(0);        // [1, h * F + F_const, *S]
    const auto out = step(x)[0].unflatten(0, {f, n_out});  // [f, F, *S]
    for (int64_t k = 0; k < f && static_cast<int64_t>(steps.size()) < truth.size(0); ++k) {
      steps.push_back(out[k]);
    }
  }
  auto pred = torch::stack(std::vector<torch::Tensor>(steps.begin() + h, steps.end()));
  return {pred, truth.narrow(0, h, pred.size(0))};
}

std::pair<torch::Tensor, double> rollout_error_sums(
    const BenchmarkMetric& metric, const data::BenchmarkSet& set, const WindowStep& step,
    const std::function<void(int64_t, const torch::Tensor&)>& each, int64_t first, int64_t count) {
  const auto n_out = static_cast<int64_t>(set.target_field_channels().size());
  auto sums = torch::zeros({n_out}, torch::kDouble);
  double steps = 0;
  const int64_t end = count < 0 ? set.n_trajectories() : first + count;
  for (int64_t n = first; n < end; ++n) {
    const auto [pred, truth] = roll_out(set, n, step);
    sums += metric(pred, truth).to(torch::kDouble).sum(0);
    steps += static_cast<double>(pred.size(0));
    if (each) each(n, pred);
  }
  return {sums, steps};
}

void add_per_channel(std::map<std::string, double>& metrics, const std::string& prefix,
                     const torch::Tensor& sums, double count,
                     const std::vector<std::string>& channels) {
  double all = 0;
  for (size_t c = 0; c < channels.size(); ++c) {
    const double v = sums[static_cast<int64_t>(c)].item<double>() / count;
    metrics[prefix + "_" + channels[c]] = v;
    all += v;
  }
  metrics[prefix] = all / static_cast<double>(channels.size());
}

std::string apply_boundary_padding(RunConfig& cfg, const data::BenchmarkSet& set) {
  const double p = cfg.domain_padding_auto;
  const auto bcs = set.boundary_conditions();
  const std::string file = set.files().empty() ? cfg.data.train_file : set.files().front();
  if (bcs.empty()) {
    throw std::runtime_error(file +
                             ": model.domain_padding_auto: the file declares no "
                             "boundary conditions (no group 'boundary_conditions'); set "
                             "model.domain_padding instead");
  }
  const auto n_dim = static_cast<int64_t>(cfg.model.n_modes().size());
  if (static_cast<int64_t>(bcs.size()) != n_dim) {
    throw std::runtime_error(file + ": model.domain_padding_auto: " + std::to_string(bcs.size()) +
                             " spatial dims, but model.n_modes has " + std::to_string(n_dim));
  }
  std::vector<double> pad;
  std::ostringstream line, list;
  line << "model.domain_padding_auto " << p << " from " << file << "'s boundary conditions:";
  for (const auto& b : bcs) {
    pad.push_back(b.periodic() ? 0.0 : p);
    line << " " << b.dim << " " << to_string(b.low)
         << (b.low == b.high ? std::string() : "/" + to_string(b.high)) << " -> " << pad.back()
         << ",";
    list << (list.tellp() > 0 ? ", " : "") << config::float_text(pad.back());
  }
  cfg.model.domain_padding(pad);
  cfg.domain_padding_auto = 0;
  record_setting(cfg, "model.domain_padding", "[" + list.str() + "]");
  record_setting(cfg, "model.domain_padding_auto", config::float_text(0.0));
  line << " so model.domain_padding [" << list.str() << "] (config.yaml records it)";
  return line.str();
}

}  // namespace fno::detail
