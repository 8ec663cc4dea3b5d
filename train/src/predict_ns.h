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

#include <fno_engine/rollout.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>

#include <torch/types.h>

#include <cstdint>
#include <string>
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
  /// [n, t_in, R, R, t_out] (space-time).
  std::vector<int64_t> model_input_shape() const;

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

 private:
  bool recurrent_ = true;
  int64_t t_in_ = 0, t_out_ = 0, subsample_ = 1;
};

}  // namespace fno::detail
