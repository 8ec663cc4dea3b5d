// Benchmark formats (data.format): each test set's error in the benchmark's
// own metric per field (PDEBench's nRMSE; The Well's VRMSE for The Well and
// PDEArena), at the end of a run: of the one-step
// predictions of its windows, and of an autoregressive rollout of each
// trajectory (summary.json's metrics; docs/data.md, "Benchmark formats").
// fno_predict computes the same (predict_benchmark.cpp; benchmark_run.h).
// Several ranks share them as they share evaluate(): each shard (a rank, or
// under distributed.domain_parallel a sample group, on its rows of each set:
// the metric's grid sums added over the band, a rollout's band fed its own
// predicted rows) takes a contiguous share of each set's windows and of its
// trajectories, and the sums are added over the shards in one collective.
#include "benchmark_run.h"
#include "training_run.h"

namespace fno {
namespace detail {

// One-step: the metric per target channel of each window's predicted steps,
// the mean over windows and steps ("<set>_vrmse_<channel>"). Rollout, where
// the targets are the time-varying inputs: from each trajectory's first
// `history` steps, the model's predictions fed back as inputs to the
// trajectory's end; the metric per channel of every predicted step, the mean
// over steps and trajectories ("<set>_rollout_vrmse_<channel>").
std::map<std::string, double> TrainingRun::benchmark_metrics() {
  torch::NoGradGuard no_grad;
  s_.model->eval();
  const int64_t f = c_.data.horizon;
  auto metric = benchmark_metric(c_.data.format);
  // Each metric's per-channel sums (a rollout's then its number of steps),
  // set after set, and what they become: {key prefix, offset, channels,
  // count (0: the rollout's, summed after its sums)}.
  std::vector<double> sums;
  struct Entry {
    std::string prefix;
    size_t at;
    const std::vector<std::string>* channels;
    double count;
  };
  std::vector<Entry> entries;
  const auto append = [&](const torch::Tensor& t) {
    const auto c = t.contiguous();
    sums.insert(sums.end(), c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  };
  for (const auto& e : s_.tests) {
    if (!e.benchmark) continue;
    const SetBand on_band(s_, e);
    metric.band = e.band;
    metric.device = s_.device;
    const auto& set = *e.benchmark;
    const auto& channels = set.target_field_channels();
    const auto fields = static_cast<int64_t>(channels.size());
    auto window_sums = torch::zeros({fields}, torch::kDouble);
    const auto [lo, mine] = shard_share(e.x.size(0));
    for (int64_t start = lo; start < lo + mine; start += e.batch_size) {
      const int64_t len = std::min(e.batch_size, lo + mine - start);
      const auto out = predict(e.x.narrow(0, start, len).to(s_.device)).cpu();
      window_sums += window_error_sums(metric, out, e.y.narrow(0, start, len).cpu(), f);
    }
    entries.push_back({e.name + "_" + metric.name(), sums.size(), &channels,
                       static_cast<double>(e.x.size(0) * f)});
    append(window_sums);
    if (!can_roll_out(set)) continue;
    // x: [1, C_in, *S] raw -> [1, f * F, *S] decoded
    const WindowStep step = [this](const torch::Tensor& x) {
      auto in = x.to(s_.device);
      if (c_.data.encode_input) in = s_.in_rows().transform(in);
      return predict(in).cpu();
    };
    const auto [first, count] = shard_share(set.n_trajectories());
    const auto [roll, steps] = rollout_error_sums(metric, set, step, {}, first, count);
    entries.push_back({e.name + "_rollout_" + metric.name(), sums.size(), &channels, 0});
    append(roll);
    sums.push_back(steps);
  }
  s_.model->train();
  if (auto* g = s_.shard_group()) sums = g->all_reduce_sum(sums);  // one collective for all
  std::map<std::string, double> metrics;
  for (const auto& en : entries) {
    const auto fields = static_cast<int64_t>(en.channels->size());
    const auto t = torch::tensor(
        std::vector<double>(sums.begin() + static_cast<std::ptrdiff_t>(en.at),
                            sums.begin() + static_cast<std::ptrdiff_t>(en.at) + fields),
        torch::kDouble);
    const double count = en.count > 0 ? en.count : sums[en.at + static_cast<size_t>(fields)];
    add_per_channel(metrics, en.prefix, t, count, *en.channels);
  }
  return metrics;
}

}  // namespace detail
}  // namespace fno
