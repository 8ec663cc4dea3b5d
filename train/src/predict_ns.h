// Internal to predict(): Navier-Stokes runs (data.problem ns). The input is a
// records file ((N, R, R, T), dataset "u" as fno_datagen --problem ns writes
// it), of which the first t_in records are the model's input, taken as the
// trainer takes them (subsampled by data.subsample); the prediction is the
// t_out records after them, made as fno_train's evaluation makes them: the
// recurrent FNO-2D rolled out t_out times (rollout()), or the space-time
// FNO-3D's forward over (x, y, t) from the t_in records repeated along t_out.
// Given the truth (the same records, t_in .. t_in + t_out - 1), the errors per
// sample are the evaluation's: its "<set>_l2" is their mean.
#pragma once

#include <fno/band.h>
#include <fno_data/darcy.h>
#include <fno_engine/rollout.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fno::detail {

class NsPrediction {
 public:
  /// `cfg`: the run's (data.t_in, data.t_out, data.ns_mode, data.subsample).
  explicit NsPrediction(const RunConfig& cfg);

  bool recurrent() const { return recurrent_; }
  int64_t t_in() const { return t_in_; }
  /// The records predicted (known once load() has run: data.t_out, or with
  /// data.t_out -1 the records the truth holds after the first t_in).
  int64_t t_out() const { return t_out_; }

  /// Samples [o.first, o.first + o.count) of o.input: x the first t_in records
  /// [n, t_in, R, R], raw; with a `y_key`, y the truth in the model's output
  /// layout ([n, t_out, R, R] recurrent, [n, 1, R, R, t_out] space-time).
  /// Throws PredictUsageError for a range past the file's end and
  /// std::runtime_error naming the file for other bad inputs.
  void load(const PredictOptions& o, const std::string& x_key, const std::string& y_key);
  torch::Tensor x, y;

  /// The model's input shape for x: [n, t_in, R, R] (recurrent), or
  /// [n, t_in, R, R, t_out] (space-time); the second for n samples on a grid.
  std::vector<int64_t> model_input_shape() const;
  std::vector<int64_t> model_input_shape(int64_t n, at::IntArrayRef grid) const;

  /// Records as the model's pairs: x the first t_in records, raw; y the t_out
  /// after them in the model's output layout (t_in + t_out records needed).
  // u: [n, R, R', T] -> x [n, t_in, R, R'], y [n, t_out, R, R'] or [n, 1, R, R', t_out]
  data::FieldPairs pairs(const torch::Tensor& u) const;

  /// data.t_out -1 (the records after t_in): the count, once a file gives it.
  void set_t_out(int64_t t_out) { t_out_ = t_out; }
  int64_t subsample() const { return subsample_; }

  /// The evaluation's prediction from inputs as the model takes them
  /// (normalized when data.encode_input), not decoded.
  // x: [b, t_in, R, R] -> [b, t_out, R, R] (recurrent) or [b, 1, R, R, t_out] (space-time)
  torch::Tensor forward(const StepModel& model, const torch::Tensor& x) const;

  /// Model outputs or truths as trajectories of records, as predictions.h5 holds them.
  // y: [b, t_out, R, R] or [b, 1, R, R, t_out] -> [b, t_out, R, R]
  torch::Tensor trajectory(const torch::Tensor& y) const;

  /// Each sample's errors, float64 on the CPU: l2 [b] the relative L2 of the
  /// whole trajectory (the evaluation's "<set>_l2"), h1 [b] the relative H1
  /// over the grid (space-time: over (x, y, t); recurrent: over (x, y), the
  /// records as channels), per_record [b, t_out] each record's relative L2
  /// (the evaluation's "<set>_l2_per_step").
  struct Errors {
    torch::Tensor l2, h1, per_record;
  };
  // out, y: [b, ...] decoded, in the model's output layout
  Errors errors(const torch::Tensor& out, const torch::Tensor& y) const;
  /// errors() of the whole grid from this rank's rows of `band` (of
  /// `grid_rows` rows): the squared norms (and H1's differences, with halo
  /// rows) summed over the band's ranks before the ratios, in float64. Called
  /// alike on every rank of the band.
  // out, y: [b, ...] this rank's rows (dim 2), decoded, in the model's output layout
  Errors band_errors(const Band& band, int64_t grid_rows, const torch::Tensor& out,
                     const torch::Tensor& y) const;

 private:
  bool recurrent_ = true;
  int64_t t_in_ = 0, t_out_ = 0, subsample_ = 1;
};

/// A Navier-Stokes run's records read a band of rows at a time, for ranks
/// that each hold one (predict_domain.cpp): HDF5 (and .mat v7.3) files at
/// data.subsample 1 by hyperslab, other files (or records the hyperslab
/// reader cannot take: the loaders then say why) loaded whole by
/// NsPrediction::load and cut. Several files' samples, in order, are one set.
class NsRecordRows {
 public:
  /// Opens `paths`' records `x_key` (and with a `y_key`, the truth's); sets
  /// `ns`'s t_out when it is -1 (from the first file). Errors as
  /// NsPrediction::load's; files whose grids differ are an error naming them.
  NsRecordRows(const std::vector<std::string>& paths, const std::string& x_key,
               const std::string& y_key, NsPrediction& ns);
  ~NsRecordRows();
  NsRecordRows(const NsRecordRows&) = delete;
  NsRecordRows& operator=(const NsRecordRows&) = delete;

  /// The records' grid (R, R'), subsampled.
  const std::vector<int64_t>& grid() const { return grid_; }
  /// Throws PredictUsageError when [first, first + count) (count -1: to the
  /// end) is past the samples; returns its count.
  int64_t check_range(int64_t first, int64_t count) const;
  /// Sample s's rows [r0, r1): x [1, t_in, rows, R'] raw, and with the truth
  /// y in the model's output layout ([1, t_out, rows, R'] or [1, 1, rows, R', t_out]).
  std::pair<torch::Tensor, torch::Tensor> read(int64_t s, int64_t r0, int64_t r1) const;

 private:
  struct File;
  void open(File& f, const std::string& x_key, const std::string& y_key);
  const File& file_of(int64_t& s) const;
  NsPrediction& ns_;
  bool truth_;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<int64_t> grid_;
};

}  // namespace fno::detail
