// Internal to predict(): fno_predict on a run trained on benchmark data
// (data.format well, pdebench or pdearena; predict_benchmark.cpp).
#pragma once

#include <fno_train/config.h>
#include <fno_train/distributed.h>
#include <fno_train/predict.h>

#include <memory>
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

/// The run's config when it trained on benchmark data (its config.yaml's
/// data.format, no --model-config); nullopt otherwise.
std::optional<RunConfig> benchmark_run_config(const PredictOptions& o);

/// predict_benchmark under --domain-parallel N over `world` (N ranks, one
/// sample group): each rank reads its band of rows of each window
/// (BenchmarkSet::select_rows), runs the tiled forward on its band, and rolls out on its
/// rows; the metric per field is the whole grid's (the band's sums added over
/// its ranks); the predictions are gathered to rank 0, which writes the
/// output and the summary, as one process's.
PredictResult predict_benchmark_domain(const PredictOptions& o, RunConfig cfg,
                                       std::shared_ptr<dist::Group> world);

}  // namespace fno::detail
