// Internal to predict(): its progress on stderr, with fno_train's display
// (progress.h): a bar on a terminal, a plain line every `every` seconds when
// piped. A prediction held in memory counts its samples; a streamed one its
// tiles, each tile read from the input and each tile written (the number per
// sample follows from the plan's sweeps). Short runs show nothing: no bar
// before kQuietSeconds, no plain line before half of `every`.
#pragma once

#include <fno/tiled.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "progress.h"

namespace fno::detail {

/// --progress: auto, bar, plain or none.
inline Progress parse_progress(const std::string& text) {
  if (text == "auto") return Progress::kAuto;
  if (text == "bar") return Progress::kBar;
  if (text == "plain") return Progress::kPlain;
  if (text == "none") return Progress::kNone;
  throw PredictUsageError("--progress: expected auto, bar, plain or none, got '" + text + "'");
}

/// The input tiles a streamed forward reads and the output tiles it writes
/// for one sample, under `plan` for a first spatial dim of `rows` rows and a
/// model of `layers` blocks: its lifting's sweep reads every tile; each of the
/// blocks' sweeps reads them again when it remakes its block input from the
/// model input (no keep_latest); the last sweep writes every tile.
inline int64_t stream_tile_calls(const TiledPlan& plan, int64_t rows, int64_t layers) {
  const int64_t tiles = (rows + plan.tile_rows - 1) / std::max<int64_t>(plan.tile_rows, 1);
  return tiles * ((plan.keep_latest ? 1 : 1 + layers) + 1);
}

class PredictProgress {
 public:
  static constexpr double kQuietSeconds = 2;

  PredictProgress(Progress mode, double every) : display_(mode, every, /*main=*/true) {
    display_.quiet_for = kQuietSeconds;
    display_.start_epoch(0);
  }
  ~PredictProgress() { display_.clear(); }
  PredictProgress(const PredictProgress&) = delete;
  PredictProgress& operator=(const PredictProgress&) = delete;

  /// `done` of `total` samples predicted (held in memory).
  void samples(int64_t done, int64_t total) {
    display_.show("predict", "sample", done, total, done, total, "samples");
  }

  /// A streamed prediction of `samples` samples, `per_sample` tile calls each.
  void stream(int64_t samples, int64_t per_sample) {
    samples_ = samples;
    per_sample_ = std::max<int64_t>(per_sample, 1);
  }
  /// One more tile read or written for sample `i` (0-based) of a streamed prediction.
  void tile(int64_t i) {
    ++calls_;
    const int64_t total = samples_ * per_sample_;
    const int64_t done = std::min(calls_, total);
    display_.show("predict sample " + std::to_string(std::min(i + 1, samples_)) + "/" +
                      std::to_string(samples_),
                  "tile", done, total, done, total, "tiles");
  }
  /// Ends the bar's line (before the run's own lines).
  void clear() { display_.clear(); }

 private:
  ProgressDisplay display_;
  int64_t samples_ = 0, per_sample_ = 1, calls_ = 0;
};

}  // namespace fno::detail
