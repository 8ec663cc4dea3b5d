// Benchmark formats (data.format): each test set's error in the benchmark's
// own metric per field (PDEBench's nRMSE; The Well's VRMSE for The Well and
// PDEArena), at the end of a run: of the one-step
// predictions of its windows, and of an autoregressive rollout of each
// trajectory (summary.json's metrics; docs/data.md, "Benchmark formats").
// fno_predict computes the same (predict_benchmark.cpp; benchmark_run.h).
// Under distributed.domain_parallel every rank of the first sample group
// computes them on its rows of each set (the metric's grid sums added over
// the band; a rollout's band fed its own predicted rows).
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
  std::map<std::string, double> metrics;
  torch::NoGradGuard no_grad;
  s_.model->eval();
  const int64_t f = c_.data.horizon;
  auto metric = benchmark_metric(c_.data.format);
  for (const auto& e : s_.tests) {
    if (!e.benchmark) continue;
    const SetBand on_band(s_, e);
    metric.band = e.band;
    metric.device = s_.device;
    const auto& set = *e.benchmark;
    const auto& channels = set.target_field_channels();
    auto sums = torch::zeros({static_cast<int64_t>(channels.size())}, torch::kDouble);
    for (int64_t start = 0; start < e.x.size(0); start += e.batch_size) {
      const int64_t len = std::min(e.batch_size, e.x.size(0) - start);
      const auto out = predict(e.x.narrow(0, start, len).to(s_.device)).cpu();
      sums += window_error_sums(metric, out, e.y.narrow(0, start, len).cpu(), f);
    }
    add_per_channel(metrics, e.name + "_" + metric.name(), sums,
                    static_cast<double>(e.x.size(0) * f), channels);
    if (!can_roll_out(set)) continue;
    // x: [1, C_in, *S] raw -> [1, f * F, *S] decoded
    const WindowStep step = [this](const torch::Tensor& x) {
      auto in = x.to(s_.device);
      if (c_.data.encode_input) in = s_.in_rows().transform(in);
      return predict(in).cpu();
    };
    const auto [roll, count] = rollout_error_sums(metric, set, step);
    add_per_channel(metrics, e.name + "_rollout_" + metric.name(), roll, count, channels);
  }
  s_.model->train();
  return metrics;
}

}  // namespace detail
}  // namespace fno
