// Benchmark formats (data.format): each test set's error in the benchmark's
// own metric per field (PDEBench's nRMSE; The Well's VRMSE for The Well and
// PDEArena), at the end of a run: of the one-step
// predictions of its windows, and of an autoregressive rollout of each
// trajectory (summary.json's metrics; docs/data.md, "Benchmark formats").
#include "training_run.h"

namespace fno {
namespace detail {

namespace {

// The mean over dim 0 of per-sample values [n, C] as "<prefix>_<channel>"
// entries and their mean over the channels as "<prefix>".
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

}  // namespace

// One-step: VRMSE per target channel of each window's predicted steps, the
// mean over windows and steps ("<set>_vrmse_<channel>"). Rollout, where the
// targets are the time-varying inputs: from each trajectory's first `history`
// steps, the model's predictions fed back as inputs to the trajectory's end;
// VRMSE per channel of every predicted step, the mean over steps and
// trajectories ("<set>_rollout_vrmse_<channel>").
std::map<std::string, double> TrainingRun::benchmark_metrics() {
  std::map<std::string, double> metrics;
  torch::NoGradGuard no_grad;
  s_.model->eval();
  const int64_t h = c_.data.history, f = c_.data.horizon;
  // The benchmark's metric: PDEBench's nRMSE, else The Well's VRMSE.
  const bool pdebench = c_.data.format == DataFormat::kPdeBench;
  const std::string metric = pdebench ? "nrmse" : "vrmse";
  const auto error = [pdebench](const torch::Tensor& p, const torch::Tensor& t) {
    return pdebench ? data::nrmse(p, t) : data::vrmse(p, t);
  };
  for (const auto& e : s_.tests) {
    if (!e.benchmark) continue;
    const auto& set = *e.benchmark;
    const auto& channels = set.target_field_channels();
    const auto n_out = static_cast<int64_t>(channels.size());
    torch::Tensor sums = torch::zeros({n_out}, torch::kDouble);
    for (int64_t start = 0; start < e.x.size(0); start += e.batch_size) {
      const int64_t len = std::min(e.batch_size, e.x.size(0) - start);
      const auto out = predict(e.x.narrow(0, start, len).to(s_.device)).cpu();
      const auto y = e.y.narrow(0, start, len).cpu();
      // [len, f * F, *S] -> [len * f, F, *S] -> VRMSE [len * f, F]
      auto steps = [&](const torch::Tensor& t) {
        return t.flatten(0, 1).unflatten(0, {len * f, n_out});
      };
      sums += error(steps(out), steps(y)).to(torch::kDouble).sum(0);
    }
    add_per_channel(metrics, e.name + "_" + metric, sums, static_cast<double>(e.x.size(0) * f),
                    channels);
    // The rollout needs the targets to be the time-varying inputs, in order.
    const auto& in = set.input_field_channels();
    if (set.n_time_varying_inputs() != n_out ||
        !std::equal(channels.begin(), channels.end(), in.begin())) {
      continue;
    }
    sums.zero_();
    double count = 0;
    for (int64_t n = 0; n < set.n_trajectories(); ++n) {
      const auto truth = set.read_steps(n, 0, set.n_steps(), false);  // [T, F, *S]
      const auto constant = set.read_constant(n);                     // [F_const, *S]
      std::vector<torch::Tensor> steps;
      for (int64_t t = 0; t < h; ++t) steps.push_back(truth[t]);
      while (static_cast<int64_t>(steps.size()) < truth.size(0)) {
        std::vector<torch::Tensor> window(steps.end() - h, steps.end());
        window.push_back(constant);
        auto x = torch::cat(window).unsqueeze(0).to(s_.device);  // [1, h * F + F_const, *S]
        if (c_.data.encode_input) x = s_.in_norm.transform(x);
        const auto out = predict(x).cpu()[0].unflatten(0, {f, n_out});  // [f, F, *S]
        for (int64_t k = 0; k < f && static_cast<int64_t>(steps.size()) < truth.size(0); ++k) {
          steps.push_back(out[k]);
        }
      }
      const auto pred = torch::stack(std::vector<torch::Tensor>(steps.begin() + h, steps.end()));
      sums += error(pred, truth.narrow(0, h, pred.size(0))).to(torch::kDouble).sum(0);
      count += static_cast<double>(pred.size(0));
    }
    add_per_channel(metrics, e.name + "_rollout_" + metric, sums, count, channels);
  }
  s_.model->train();
  return metrics;
}

}  // namespace detail
}  // namespace fno
