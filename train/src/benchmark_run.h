// Internal to train/: what fno_train (trainer.cpp, benchmark_eval.cpp) and
// fno_predict (predict_benchmark.cpp) share about benchmark data
// (data.format well, pdebench, pdearena): the loader's options from the
// config, the benchmark's metric per field, the autoregressive rollout, and
// model.domain_padding_auto's padding from the files' boundary conditions.
#pragma once

#include <fno/band.h>
#include <fno_data/benchmark.h>
#include <fno_train/config.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fno::detail {

/// A benchmark's split as the loaders' options say it (fno_data/benchmark.h):
/// the data section's format, fields, window, scalars and subsampling.
data::BenchmarkOptions benchmark_options(const DataConfig& d, const std::string& split,
                                         int64_t n_trajectories);

/// The benchmark's metric: PDEBench's nRMSE, else The Well's VRMSE (The Well,
/// PDEArena).
struct BenchmarkMetric {
  bool pdebench = false;
  /// distributed.domain_parallel: this rank's rows of the grid (fno/band.h).
  /// On a split band, pred and target hold the band's rows alone and the
  /// metric is the whole grid's: each sample's grid sums (squared error,
  /// target, target squared, points) added over the band's ranks before the
  /// ratios. The default: one process, the whole grid.
  Band band;
  /// Where the band's sums run: the device of its ranks' group (NCCL's are
  /// on the GPU).
  torch::Device device = torch::kCPU;
  /// "nrmse" or "vrmse".
  std::string name() const { return pdebench ? "nrmse" : "vrmse"; }
  /// pred, target: [B, C, *S] -> [B, C]
  torch::Tensor operator()(const torch::Tensor& pred, const torch::Tensor& target) const;
};
BenchmarkMetric benchmark_metric(DataFormat format);

/// One-step errors of a batch of windows, per target channel summed over the
/// windows and their predicted steps: out, y: [b, horizon * F, *S] decoded ->
/// [F] float64.
torch::Tensor window_error_sums(const BenchmarkMetric& metric, const torch::Tensor& out,
                                const torch::Tensor& y, int64_t horizon);

/// Whether a set rolls out: its targets are its time-varying inputs, in order.
bool can_roll_out(const data::BenchmarkSet& set);

/// A model's step on one window: x [1, C_in, *S] raw (as the set gives it) ->
/// [1, horizon * F, *S] decoded, on the CPU.
using WindowStep = std::function<torch::Tensor(const torch::Tensor&)>;

/// Trajectory n rolled out from its first `history` steps, the predictions
/// fed back as inputs to the trajectory's end: the predicted steps and the
/// truth's, [T - history, F, *S] each. Of the set's rows (select_rows: under
/// domain parallel a band's predicted rows are its next input rows).
std::pair<torch::Tensor, torch::Tensor> roll_out(const data::BenchmarkSet& set, int64_t n,
                                                 const WindowStep& step);

/// The rollout of trajectories [first, first + count) of `set` (count -1:
/// every one from first on): per target channel, the metric summed over every
/// predicted step ([F] float64), and the number of steps. `each` (if set)
/// sees trajectory n's prediction [T - history, F, *S].
std::pair<torch::Tensor, double> rollout_error_sums(
    const BenchmarkMetric& metric, const data::BenchmarkSet& set, const WindowStep& step,
    const std::function<void(int64_t, const torch::Tensor&)>& each = {}, int64_t first = 0,
    int64_t count = -1);

/// "<prefix>_<channel>": sums[c] / count; "<prefix>": their mean over the channels.
void add_per_channel(std::map<std::string, double>& metrics, const std::string& prefix,
                     const torch::Tensor& sums, double count,
                     const std::vector<std::string>& channels);

/// model.domain_padding_auto > 0: sets cfg.model's domain_padding per spatial
/// dim from the set's boundary conditions (0 where periodic at both ends, the
/// fraction elsewhere) and records it in cfg's resolved YAML (the auto key as
/// 0); returns the line that says so. Throws naming the file when the files
/// declare no boundary conditions.
std::string apply_boundary_padding(RunConfig& cfg, const data::BenchmarkSet& set);

}  // namespace fno::detail
