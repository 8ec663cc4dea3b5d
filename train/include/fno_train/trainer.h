// The trainer: epochs of forward, loss, backward and optimizer step, the lr
// schedule per epoch, evaluation at every test resolution, checkpoints and the
// run directory's outputs.
//
// Run directory:
//   config.yaml          the resolved configuration
//   metrics.jsonl        one JSON object per epoch: epoch, lr, train_loss,
//                        eval metrics ("16_l2", ...), seconds, peak_gpu_bytes
//   summary.json         n_params, metrics (last evaluation), device, wall seconds
//   predictions.h5       a few test inputs, truths and predictions per test set
//   checkpoint_latest.pt model, optimizer, scheduler, normalizers, RNG, epoch
//                        (and the batch, when a signal stopped the run mid-epoch),
//                        with a SHA-1 of its contents
//   checkpoint_previous.pt the one before it, for when the latest is damaged
//   checkpoint_best.pt   the same, at the best value of the first eval metric
//   model.pt             the final model as a plain state dict (loads in Python)
//   normalizers.pt       beside it, when the run normalizes: norm.in.*/norm.out.*
//                        (mean, std) and norm.pointwise; what fno_predict needs too
//   telemetry.jsonl      with offloading: one line per step (ms, bytes moved, GB/s,
//                        waits, peak GPU memory)
//   memory_timeline.csv  on a GPU: allocator samples of one training step
//                        (t_ms, allocated, reserved, phase, event)
//   offload_plan.txt     with --offload auto: the chosen plan and its key (model,
//                        input, budget, device); --resume reuses it
//   inputs.txt           each data file the run reads (data.train_file,
//                        data.test[i].file): its path, size and hash;
//                        --resume refuses files that differ
// Checkpoints are torch.save files (the model's keys as in Python, under
// "model."), written atomically.
#pragma once

#include <fno_train/config.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace fno {

/// A run that cannot continue (non-finite loss, unusable checkpoint).
class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The run stopped on SIGINT or SIGTERM after finishing its current step and
/// writing a checkpoint; exit with 128 + signal().
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

/// The first file of `dir` that shows a run trained there (a checkpoint,
/// metrics.jsonl, config.yaml beside no dry run's summary.json, ...), or ""
/// when it holds none: no directory, or one that holds only a dry run's
/// files or files of no run. fno_train writes over no such directory but
/// the run it resumes.
std::string run_file_in(const std::string& dir);

/// Throws ConfigError when a data file of `cfg` (its path, or its contents:
/// size and hash) is not the one `run_dir`/inputs.txt records: resuming would
/// mix two data sets. A run without inputs.txt (older) passes. fno_train
/// calls it before --resume loads anything.
void check_run_inputs(const RunConfig& cfg, const std::string& run_dir);

class Trainer {
 public:
  /// Loads and validates the data, builds the model, optimizer and scheduler.
  /// `run_dir` is created if needed; it must be writable.
  Trainer(RunConfig config, std::string run_dir);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Restores the latest checkpoint of run_dir, or the previous one when the
  /// latest is missing or damaged; returns the last complete epoch it holds.
  /// Throws TrainingError when there is no usable checkpoint. The caller
  /// checks the data files first (check_run_inputs).
  int64_t resume();

  /// Validates the config, the data and the model; trains nothing. With
  /// `write`, writes config.yaml and summary.json (n_params, data shapes,
  /// "dry_run": true). On a GPU, returns (and with `write` writes to
  /// offload_estimates.txt) the estimated peak memory of each offload policy
  /// for one training batch; else "".
  std::string dry_run(bool write = true);

  /// Trains up to config.epochs and writes the outputs; returns the last metrics.
  /// On SIGINT/SIGTERM it finishes the current step, writes a checkpoint and
  /// throws Interrupted.
  std::map<std::string, double> train();

  int64_t n_params() const;
  const RunConfig& config() const;
  /// This process's rank under torchrun (0 alone); rank 0 writes the run directory.
  int64_t rank() const;
  /// One line: device, model, data sizes, optimizer and schedule.
  std::string describe() const;

  struct State;  // opaque

 private:
  std::unique_ptr<State> s_;
};

}  // namespace fno
