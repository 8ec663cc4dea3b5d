// Internal to train/: one call of Trainer::train (TrainingRun). Its loop,
// steps and checkpoints are training_run.cpp's; its evaluation, predictions
// and outputs evaluation.cpp's.
#pragma once

#include "progress.h"
#include "trainer_state.h"

namespace fno {
namespace detail {

using EvalLoss = StepLoss;

// training.eval_losses by name ("h1", "l2"; each once), summed over the batch.
inline std::map<std::string, EvalLoss> eval_losses(const RunConfig& c) {
  const int64_t d = static_cast<int64_t>(c.model.n_modes().size());
  std::map<std::string, EvalLoss> losses;
  for (const auto loss : c.training.eval_losses) losses[to_string(loss)] = relative_loss(loss, d);
  return losses;
}

// distributed.domain_parallel: while in scope the step takes the rows of a
// test set's grid (another grid than the training one, maybe), then the
// training grid's again.
class SetBand {
 public:
  SetBand(Trainer::State& s, const EvalSet& e) : s_(s) {
    if (s_.domain) s_.step->set_band(e.band);
  }
  ~SetBand() {
    if (s_.domain) s_.step->set_band(s_.domain->band);
  }
  SetBand(const SetBand&) = delete;
  SetBand& operator=(const SetBand&) = delete;

 private:
  Trainer::State& s_;
};

// One epoch's training loss and what the epoch line reports besides.
struct EpochStats {
  double lr = 0;          // the learning rate of the epoch's steps
  double train_loss = 0;  // mean over the samples of the steps taken, all ranks
  int64_t step_peak = 0;  // the largest offloaded step's peak GPU memory
  int64_t skipped = 0;    // fp16: steps skipped for non-finite gradients
  // training.max_grad_norm: the finite gradient norms (before clipping) of this
  // process's steps in the epoch, their mean and largest
  double grad_norm_mean = 0, grad_norm_max = 0;
  // data.stream: seconds the steps waited for their batches, and the I/O
  // thread's seconds reading (-1: not streamed)
  double data_wait_s = -1, data_read_s = -1;
};

// One call of Trainer::train: the epochs (train_epoch -> train_step), the
// evaluation, the checkpoints, metrics.jsonl and telemetry.jsonl, and the run
// outputs at the end (predictions.h5, model.pt, summary.json).
class TrainingRun {
 public:
  explicit TrainingRun(Trainer::State& s)
      : s_(s),
        c_(s.cfg),
        progress_(s.cfg.output.progress, s.cfg.output.progress_every, s.main()),
        losses_(eval_losses(s.cfg)) {
    if (s_.train_step->cuda_graphs() && !s_.tests.empty()) capture_evaluation();
  }

  // Opens the logs (after the stop handlers are installed, as before).
  void open_logs();
  EpochStats train_epoch(int64_t epoch);
  // After an epoch: the schedule, evaluation, metrics.jsonl, checkpoints and the epoch line.
  void end_epoch(int64_t epoch, const EpochStats& stats, Clock::time_point t0);
  std::map<std::string, double> evaluate();
  // This shard's contiguous share of n items (a test set's samples, its
  // trajectories), as evaluate() and benchmark_metrics() split them over the
  // shards: {first, count}, possibly none.
  std::pair<int64_t, int64_t> shard_share(int64_t n) const;
  torch::Tensor predict(const torch::Tensor& x);
  // Benchmark formats: each test set's VRMSE per field, one step and rolled out
  // (benchmark_eval.cpp); at the end of a run, every rank its shard's share.
  std::map<std::string, double> benchmark_metrics();
  // predictions.h5, model.pt and summary.json (rank 0; under domain parallel
  // every rank of the first shard calls it, to make the predictions).
  void write_outputs(const std::map<std::string, double>& metrics, Clock::time_point wall0);

  std::map<std::string, double> last_metrics;
  // Navier-Stokes: the last evaluation's relative L2 error per predicted
  // record, by "<set>_l2_per_step", and of the trajectory up to each record,
  // by "<set>_l2_upto" (metrics.jsonl, predictions.h5).
  std::map<std::string, std::vector<double>> per_record;

 private:
  // evaluate()'s key infixes of a per-record sum ("<set>#step#<t>") and of a
  // sum up to a record ("<set>#upto#<t>").
  static constexpr const char* kPerStep = "#step#";
  static constexpr const char* kUpTo = "#upto#";
  // Navier-Stokes: per_step_rel_l2's and cumulative_rel_l2's sums over the
  // batch; under domain parallel of the whole grid from this rank's rows of
  // `band` (each sample's squared norms added over the band's ranks before the
  // square roots and ratios; the host reads them after band.drain()).
  // out, y: [B, C, *S] decoded -> [2, t_out] float64
  torch::Tensor record_errors(const torch::Tensor& out, const torch::Tensor& y,
                              const Band& band = {}) const;
  StepResult train_step(const torch::Tensor& x, const torch::Tensor& y);
  // The metrics of a test set by name: losses_, or under domain parallel each
  // the whole grid's from this rank's rows of the set.
  std::map<std::string, EvalLoss> set_losses(const EvalSet& e) const;
  // Evaluation as CUDA graphs beside the step's (one per batch shape, in its
  // memory pool): the forward and the metrics, added on the device into
  // eval_sums_ (and eval_steps_) per test set.
  void capture_evaluation();
  std::vector<torch::Tensor> eval_body(const std::vector<torch::Tensor>& inputs);
  std::unique_ptr<GraphedFunction> eval_graphs_;
  torch::Tensor eval_sums_;   // [metrics] float32: each metric's sum over the set so far
  torch::Tensor eval_steps_;  // Navier-Stokes: [2, t_out] float64, record_errors' sums
  void after_step(int64_t epoch, Clock::time_point step_t0, bool record);
  // Hands the checkpoint of now to the writer thread, to be written to each
  // of `names` in order (rank 0; "checkpoint_latest.pt" rotates).
  void save_checkpoints(const std::vector<std::string>& names, int64_t epoch, int64_t batch = 0,
                        double loss_sum = 0, int64_t samples = 0);
  [[noreturn]] void stop(int sig, int64_t epoch, size_t batch, std::pair<double, int64_t> totals);
  void log_epoch(int64_t epoch, const EpochStats& stats,
                 const std::map<std::string, double>& metrics, double seconds, int64_t peak);
  // predictions.h5's datasets and attributes (none: not written), on the CPU.
  struct Predictions {
    std::vector<std::pair<std::string, torch::Tensor>> sets;
    std::vector<data::Attribute> attrs;
  };
  Predictions predictions();
  void write_summary(const std::map<std::string, double>& metrics, Clock::time_point wall0);

  Trainer::State& s_;
  const RunConfig& c_;
  ProgressDisplay progress_;
  std::map<std::string, EvalLoss> losses_;
  std::ofstream metrics_log_;
  std::ofstream telemetry_;
  int64_t global_step_ = 0;
  int64_t timeline_step_ = -1;  // the step whose memory timeline is written
  // Writes checkpoints, predictions.h5 and model.pt off this thread; last, so
  // that it is destroyed (waiting for the write in flight) first.
  BackgroundWriter writer_;
};

}  // namespace detail
}  // namespace fno
