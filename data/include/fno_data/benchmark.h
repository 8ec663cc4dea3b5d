// Benchmark data as it ships: The Well, PDEBench and PDEArena HDF5 files read
// directly (docs/data.md, "Benchmark formats"), as next-step pairs from a time
// window: the input is `history` consecutive steps of the chosen fields as
// channels (time-major: step 0's fields, then step 1's, ...; fields constant
// in time once, after them; then the chosen scalars, each a channel constant
// in space), the target the next `horizon` steps of the target fields. Every
// window of every trajectory of the split is a sample, in the order
// trajectory, then start step (The Well's order).
//
// Arrays are read by hyperslab (Hdf5SlabReader), one trajectory's steps at a
// time. Errors are std::runtime_error, one line that starts with the file.
#pragma once

#include <fno_data/darcy.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fno::data {

enum class BenchmarkFormat { kWell, kPdeBench, kPdeArena };

/// "well", "pdebench", "pdearena".
std::string to_string(BenchmarkFormat format);

struct BenchmarkOptions {
  TORCH_ARG(BenchmarkFormat, format) = BenchmarkFormat::kWell;
  /// The benchmark's split: The Well's data/<split>/ folder, PDEArena's group
  /// (and file names holding it), PDEBench's convention ("train": all but
  /// the first tenth of a one-file set, all but the last tenth of the sorted
  /// sample groups; "test": that tenth).
  TORCH_ARG(std::string, split) = "train";
  /// The input fields by name, in channel order; {}: every field the files
  /// hold, in the benchmark's order.
  TORCH_ARG(std::vector<std::string>, fields) = {};
  /// The target fields; {}: the time-varying input fields.
  TORCH_ARG(std::vector<std::string>, target_fields) = {};
  /// Steps given as input, and steps predicted after them.
  TORCH_ARG(int64_t, history) = 1;
  TORCH_ARG(int64_t, horizon) = 1;
  /// The first n trajectories of the split; -1: all.
  TORCH_ARG(int64_t, n_trajectories) = -1;
  /// Keep every k-th grid point along each spatial dim.
  TORCH_ARG(int64_t, subsample) = 1;
  /// Scalars given as inputs, by name (The Well's scalars/, e.g. a Reynolds
  /// number; PDEArena's buo_y): each a channel constant in space after the
  /// fields' channels. Only scalars constant in time.
  TORCH_ARG(std::vector<std::string>, scalars) = {};
};

/// The Well's boundary condition codes (the_well.data.datasets.BoundaryCondition).
enum class BoundaryKind { kWall = 0, kOpen = 1, kPeriodic = 2 };

/// "WALL", "OPEN", "PERIODIC".
std::string to_string(BoundaryKind kind);

/// One spatial dim's boundary conditions at its two ends, as The Well's
/// WellDataset reads them for boundary_return_type "padding": an end is open
/// unless a group of boundary_conditions/ names the dim; a WALL group counts
/// where its mask holds over the whole end, the others where it holds anywhere.
struct DimBoundary {
  std::string dim;  // the spatial dim's name ("x")
  BoundaryKind low = BoundaryKind::kOpen, high = BoundaryKind::kOpen;
  bool periodic() const {
    return low == BoundaryKind::kPeriodic && high == BoundaryKind::kPeriodic;
  }
};

/// One split of a benchmark data set: a file, or a folder of files (The Well's
/// shards, PDEArena's files), opened and checked (fields, ranks, grids, the
/// window against the time axis).
class BenchmarkSet {
 public:
  /// `path`: The Well: the data set's folder (holding data/<split>/), a split
  /// folder, or one file; PDEBench: one file; PDEArena: one file or a folder
  /// of files whose names hold the split.
  BenchmarkSet(const std::string& path, const BenchmarkOptions& options);
  ~BenchmarkSet();
  BenchmarkSet(const BenchmarkSet&) = delete;
  BenchmarkSet& operator=(const BenchmarkSet&) = delete;

  const BenchmarkOptions& options() const;
  /// The files read, in order.
  const std::vector<std::string>& files() const;
  int64_t n_trajectories() const;
  /// Time steps of each trajectory.
  int64_t n_steps() const;
  /// Windows (samples): n_trajectories * (n_steps - history - horizon + 1).
  int64_t n_windows() const;
  /// The spatial grid S (after subsampling).
  const std::vector<int64_t>& grid() const;
  /// From now on read_steps(), read_constant() and windows() give rows
  /// [row0, row0 + rows) of the first spatial dim of the grid alone, read by
  /// hyperslab (a band of rows, under domain parallel); grid() and the
  /// statistics stay the whole grid's. Throws naming the file for rows past
  /// the grid.
  void select_rows(int64_t row0, int64_t rows);
  /// The grid of what windows() gives: grid(), or after select_rows its rows.
  std::vector<int64_t> read_grid() const;
  /// The channels' names ("density", "velocity_x", ...; per step "t0:density"
  /// ...), in the order of x's and y's channels.
  std::vector<std::string> input_channels() const;
  std::vector<std::string> output_channels() const;
  /// The names of the chosen input fields' channels at one step (time-varying
  /// first, then constant), and of the target fields'.
  const std::vector<std::string>& input_field_channels() const;
  const std::vector<std::string>& target_field_channels() const;
  /// The number of those that vary in time.
  int64_t n_time_varying_inputs() const;
  /// The chosen scalars' channels (options().scalars), the last of input_field_channels().
  int64_t n_scalar_inputs() const;
  /// Per spatial dim, the files' boundary conditions (The Well's
  /// boundary_conditions/ group of its first file, read when asked); {} when
  /// the files declare none. Throws naming the file and the group for a
  /// bc_type other than WALL, OPEN, PERIODIC.
  std::vector<DimBoundary> boundary_conditions() const;

  /// Trajectory n, steps [t0, t1), of the input (targets = false) or target
  /// fields that vary in time: [t1 - t0, C, *S] float32.
  torch::Tensor read_steps(int64_t n, int64_t t0, int64_t t1, bool targets) const;
  /// Trajectory n's input fields constant in time, then its chosen scalars
  /// broadcast over the grid: [C, *S] ([0, *S] if none).
  torch::Tensor read_constant(int64_t n) const;
  /// Windows [w0, w1): x [w, C_in, *S], y [w, C_out, *S].
  // -> x: [w1 - w0, history * F + F_const + scalars, *S], y: [w1 - w0, horizon * F_out, *S]
  FieldPairs windows(int64_t w0, int64_t w1) const;
  /// Every window.
  FieldPairs all_windows() const;
  /// Window w's trajectory and start step (benchmark_stream.h reads windows by them).
  std::pair<int64_t, int64_t> window_at(int64_t w) const;

  /// Per field channel, over every step of every trajectory of the split: the
  /// mean and the unbiased std, [C] each, for input_field_channels() and
  /// target_field_channels().
  /// (A scalar's channel counts its value once per step and grid point of
  /// each trajectory, as the fields'.)
  std::pair<torch::Tensor, torch::Tensor> input_field_stats() const;
  std::pair<torch::Tensor, torch::Tensor> target_field_stats() const;

  /// The statistics the benchmark ships (The Well's stats.yaml beside data/,
  /// found in the files' folder or up to two above it), as the_well 1.2.0's
  /// ZScoreNormalization applies them (WellDataset(use_normalization=True)):
  /// per field its mean and its std clipped below at 1e-4, a scalar value for
  /// every channel of the field or one per channel; [C] each, for
  /// input_field_channels() (the scalars' channels: mean 0, std 1, as The
  /// Well leaves scalars as they are) and target_field_channels(). Throws
  /// naming the file and the field when a chosen field has none, or when the
  /// benchmark ships none.
  std::pair<torch::Tensor, torch::Tensor> shipped_input_stats() const;
  std::pair<torch::Tensor, torch::Tensor> shipped_target_stats() const;
  /// The stats.yaml found ("" none).
  const std::string& stats_file() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> p_;
};

/// The files a BenchmarkSet of `path` and `options` reads (for pinning them),
/// without opening them; throws naming `path` when there are none.
std::vector<std::string> benchmark_files(const std::string& path, const BenchmarkOptions& options);

/// The Well's VRMSE per channel: sqrt(mean_S (pred - target)^2 / (var_S(target) + eps)),
/// var unbiased, over the spatial dims of [B, C, *S] -> [B, C].
torch::Tensor vrmse(const torch::Tensor& pred, const torch::Tensor& target, double eps = 1e-7);

/// PDEBench's nRMSE per channel (pdebench/models/metrics.py, metric_func's
/// err_mean / nrm): sqrt(mean_S (pred - target)^2) / sqrt(mean_S target^2), no
/// floor, over the spatial dims of [B, C, *S] -> [B, C].
torch::Tensor nrmse(const torch::Tensor& pred, const torch::Tensor& target);

}  // namespace fno::data
