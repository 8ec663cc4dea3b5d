// Internal to predict(): fno_predict on a run trained on benchmark data
// (data.format well, pdebench or pdearena; predict_benchmark.cpp).
#pragma once

#include <fno_train/predict.h>

#include <optional>

namespace fno::detail {

/// A run whose config.yaml trains on a benchmark's files: reads --input as
/// the run's format (its fields, scalars, history, horizon; the split
/// --split, else the run's first test set's, else test), predicts the next
/// steps of each window (--samples: a range of windows) and, with --rollout,
/// rolls each trajectory out; writes the predictions with their channel names
/// as attributes and the benchmark's metric per field (VRMSE, PDEBench's
/// nRMSE) to the summary, as fno_train's summary.json has them. nullopt for
/// any other run (or --model-config): predict() goes on.
std::optional<PredictResult> predict_benchmark(const PredictOptions& o);

}  // namespace fno::detail
