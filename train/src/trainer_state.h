// Internal to train/: the trainer's state (Trainer::State) and the helpers
// its parts share. trainer.cpp sets a run up, checkpoints.cpp keeps and
// resumes it, training_run.cpp and evaluation.cpp train and evaluate it.
#pragma once

#include <fno_train/trainer.h>

#include <fno/fno.h>
#include <fno/optim.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno_data/benchmark.h>
#include <fno_data/benchmark_stream.h>
#include <fno_data/darcy.h>
#include <fno_data/fingerprint.h>
#include <fno_data/navier_stokes.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/rollout.h>
#include <fno_train/background_writer.h>
#include <fno_train/distributed.h>
#include <fno_train/domain.h>
#include <fno_train/train_step.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include <map>
#include <string>
#include <vector>

#include "dict_prefix.h"
#include "json.h"
#include "window_stream.h"

namespace fno {
namespace detail {

using Clock = std::chrono::steady_clock;
using JsonObject = json::Object;

std::string metrics_json(const std::map<std::string, double>& m);
/// Creates `path` and its parents; throws naming it when it cannot, or when it is not writable.
void make_dirs(const std::string& path);
/// MemAvailable of /proc/meminfo in bytes (0 when unknown).
int64_t host_available_bytes();
bool file_exists(const std::string& path);
void write_text_atomic(const std::string& path, const std::string& text);
/// Benchmark formats (data.format): the files a run reads, by key ("data.train_file[2]").
std::vector<std::pair<std::string, std::string>> benchmark_input_files(const RunConfig& cfg);

/// Navier-Stokes (data.problem ns): the loader's options for `n_samples`
/// samples (-1: all) and `t_out` records after data.t_in (-1: the rest), and
/// the pairs the trainer keeps of records u [N, R', R, T] (R' a band's rows):
/// x [N, t_in, R', R], y [N, 1, R', R, t_out] (space_time) or [N, t_out, R', R].
data::NsLoadOptions ns_load_options(const DataConfig& d, int64_t n_samples, int64_t t_out);
data::FieldPairs ns_pairs(const torch::Tensor& u, const DataConfig& d, int64_t t_out);

// One evaluation set, on the training device when it fits.
struct EvalSet {
  std::string name;
  int64_t batch_size;
  torch::Tensor x;      // normalized input when encode_input (Navier-Stokes: the t_in records)
  torch::Tensor x_raw;  // as loaded (for predictions.h5), on the CPU
  torch::Tensor y;      // raw truth
  // Benchmark formats: the set's trajectories (its rollout, its channels).
  std::shared_ptr<const data::BenchmarkSet> benchmark;
  // distributed.domain_parallel: this rank's rows of the set's grid (x, x_raw
  // and y hold them alone).
  Band band;
};

// distributed.domain_parallel N > 1 (domain_training.cpp): the mesh of ranks,
// this rank's band of the training grid, and the normalizers as they apply to
// its rows (the State's in_norm and out_norm hold the whole grid's, as one
// process fits them: checkpoints and normalizers.pt keep those).
struct DomainRun {
  DomainMesh mesh;
  Band band;  // of the training grid
  data::UnitGaussianNormalizer in_rows, out_rows;
  FNO proxy{nullptr};  // the model's structure at width 2, for the refusals
};

}  // namespace detail

struct Trainer::State {
  RunConfig cfg;
  std::string run_dir;
  torch::Device device{torch::kCPU};
  FNO model{nullptr};
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<LRScheduler> scheduler;
  std::unique_ptr<OffloadedStep> step;  // forward + backward under the offload policy
  Precision precision = Precision::kFP32;
  std::unique_ptr<MatmulPrecisionGuard> matmul_precision;  // tf32 or not, for the run
  std::unique_ptr<GradScaler> scaler;                      // fp16 only
  // Several processes (torchrun): the group of all ranks and the gradient
  // all-reduce; null in a single-process run.
  std::shared_ptr<dist::Group> group;
  std::unique_ptr<dist::GradientSync> grad_sync;
  // The training step over the above: loss, backward, sync, scaler, optimizer.
  std::unique_ptr<TrainStep> train_step;
  int64_t rank = 0, world_size = 1;
  bool main() const { return rank == 0; }
  // distributed.domain_parallel > 1: the mesh and this rank's band; else empty.
  std::optional<detail::DomainRun> domain;
  // The sample shards of the data (data parallel): this rank's, and how many.
  int64_t shard() const { return domain ? domain->mesh.sample_group() : rank; }
  int64_t shards() const { return domain ? domain->mesh.sample_groups() : world_size; }
  // The group that adds up per-sample sums (losses, metrics): the ranks of one
  // band across the shards (a band's sums are its whole sample's already).
  dist::Group* shard_group() const { return domain ? domain->mesh.data.get() : group.get(); }
  // The normalizers as they apply to the rows this rank holds.
  const data::UnitGaussianNormalizer& in_rows() const { return domain ? domain->in_rows : in_norm; }
  const data::UnitGaussianNormalizer& out_rows() const {
    return domain ? domain->out_rows : out_norm;
  }
  data::UnitGaussianNormalizer in_norm, out_norm;
  torch::Tensor train_x, train_y;  // normalized as configured; undefined when streamed
  // data.stream: the training split read batch by batch from its files (trainer_stream.cpp).
  std::unique_ptr<detail::WindowStream> stream;
  std::vector<detail::EvalSet> tests;
  int64_t start_epoch = 0;    // epochs already done
  int64_t start_batch = 0;    // batches of epoch start_epoch+1 already done (an interrupted epoch)
  double start_loss_sum = 0;  // their summed loss (over all ranks)
  int64_t start_samples = 0;  // and their samples (over all ranks)
  double best = std::numeric_limits<double>::infinity();
  std::string best_key;

  std::string path(const std::string& name) const { return run_dir + "/" + name; }

  // Navier-Stokes (data.problem ns): the predicted records per sample (0 otherwise).
  int64_t ns_t_out = 0;
  /// Benchmark formats: per-field statistics of the training split, [C] each.
  std::pair<torch::Tensor, torch::Tensor> field_stats_in, field_stats_out;
  int64_t n_time_varying_in = 0;
  bool ns() const { return cfg.data.problem == DataProblem::kNavierStokes; }
  bool benchmark() const { return cfg.data.format != DataFormat::kAuto; }
  bool recurrent() const { return ns() && cfg.data.ns_mode == NsMode::kRecurrent; }
  // auto's capture limit for a step (training or evaluation): kAutoGraphLimitMs
  // per application of the model, so a recurrent rollout of t_out steps gets
  // t_out times it (its ~100 ms at the paper's sizes are many small kernels:
  // graphs make its epochs 3.2x shorter on an H100).
  double auto_capture_limit_ms() const {
    return kAutoGraphLimitMs *
           static_cast<double>(recurrent() ? std::max<int64_t>(ns_t_out, 1) : 1);
  }
  // The model's input for a batch of inputs as kept: space-time Navier-Stokes
  // repeats the t_in records along the output's time axis; else x itself.
  // x: [B, t_in, R, R] -> [B, t_in, R, R, t_out] (space_time), else [B, Cin, *S] as given
  torch::Tensor model_input(const torch::Tensor& x) const {
    if (!ns() || cfg.data.ns_mode != NsMode::kSpaceTime) return x;
    return x.unsqueeze(4)
        .expand({x.size(0), x.size(1), x.size(2), x.size(3), ns_t_out})
        .contiguous();
  }
  // Model outputs or truths as trajectories of records.
  // y: [B, 1, R, R, T] (space_time) or [B, T, R, R] (recurrent) -> [B, T, R, R]
  torch::Tensor trajectory(const torch::Tensor& y) const {
    return recurrent() ? y : y.squeeze(1).permute({0, 3, 1, 2});
  }

  // The set-up, in the constructor's order.
  void join_ranks();
  void load_data();
  void check_ns_model() const;
  void load_test_sets(const data::FieldPairs& train);
  // (Under domain parallel, `band` becomes this rank's band, and the set
  // reads its rows alone.)
  data::FieldPairs load_benchmark(const std::string& file, const std::string& split,
                                  int64_t n_trajectories, bool train,
                                  std::shared_ptr<const data::BenchmarkSet>* keep = nullptr,
                                  Band* band = nullptr);
  void place_data();
  // distributed.domain_parallel (domain_training.cpp): the refusals that need
  // no data, the mesh, a file's rows of this rank, the normalizers fitted over
  // whole samples, the step on this rank's band.
  void check_domain_config();
  void join_domain();
  data::FieldPairs load_rows(const std::string& file, const data::LoadOptions& options,
                             Band& band) const;
  // Navier-Stokes (space_time): this rank's rows of a file's pairs (ns_pairs).
  data::FieldPairs load_ns_rows(const std::string& file, int64_t n_samples, int64_t t_out,
                                Band& band) const;
  // This rank's rows {row0, n} of a file's `grid` ([rows, *S]), and its band
  // of it; a grid the ranks cannot split is refused naming the file.
  std::pair<int64_t, int64_t> place_band(const std::string& file, const std::vector<int64_t>& grid,
                                         Band& band) const;
  // Benchmark data: model.domain_padding_auto's padding refused where the
  // band step cannot take it.
  void check_domain_padding(const std::string& file);
  void fit_domain_normalizers(const data::FieldPairs& train);
  void build_domain_step();
  // data.stream (trainer_stream.cpp): whether the training split streams (then
  // `stream` reads it); the pointwise normalizers by one pass over it.
  bool start_stream(const std::shared_ptr<const data::BenchmarkSet>& set);
  void fit_streamed_normalizers();
  // The training samples, their shape [N, C_in, *S], and an epoch's batches
  // (data::epoch_batches: this rank's shard, shuffled by training.seed and the epoch).
  int64_t n_train_samples() const;
  std::vector<int64_t> train_shape() const;
  std::vector<torch::Tensor> epoch_batches(int64_t epoch) const;
  // Training batch b of `epoch` (`index`: its samples), normalized as kept, on the device.
  // -> x: [B, C_in, *S] (as model_input), y: [B, C_out, *S]
  std::pair<torch::Tensor, torch::Tensor> training_batch(int64_t epoch, int64_t b,
                                                         const torch::Tensor& index) const;
  void build_model();
  void build_offload();
  void build_optimizer();
  void use_cuda_graphs();
};

// Rank and world size under torchrun; the run directory (rank 0 alone writes
// it); the device; the process group.

namespace detail {

/// distributed.domain_parallel: the relative H1 or L2 loss of the whole grid
/// from this rank's rows of `band` (band_rel_loss), summed over the batch.
StepLoss band_loss(LossName name, int64_t d, const Band& band);
/// The rows of every rank of this rank's sample, placed in the whole grid (a
/// few predicted samples for predictions.h5); every rank of the sample calls it.
// t: [k, C, n, *S'] -> [k, C, band.grid_rows, *S'] on the CPU
torch::Tensor gather_rows(const Trainer::State& s, const Band& band, const torch::Tensor& t);

/// The checkpoint of now (model, optimizer, schedule, normalizers, RNG, where
/// the run stands); the file's keys are checkpoints.cpp's.
TensorDict checkpoint_dict(Trainer::State& s, int64_t epoch, int64_t batch = 0, double loss_sum = 0,
                           int64_t samples = 0);
/// normalizers.pt: norm.in.* and norm.out.* of the fitted normalizers and
/// norm.pointwise (1: data.normalization pointwise), on the CPU; empty when none is fitted.
TensorDict normalizers_dict(const Trainer::State& s);
/// The run's data files with their fingerprints, as inputs.txt holds them.
std::string inputs_text(const RunConfig& cfg);
constexpr const char* kInputsFile = "inputs.txt";

/// Installs the stop handlers (SIGINT, SIGTERM) for its lifetime, restoring
/// the previous ones; stop_signal() is the signal that asked the run to stop, or 0.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};
int stop_signal();

}  // namespace detail
}  // namespace fno
