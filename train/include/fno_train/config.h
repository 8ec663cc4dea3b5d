// The run configuration: one schema, documented in one place (the key table of
// train/src/config_schema.cpp, rendered as configs/README.md by
// `fno_train --print-schema`), read into one typed struct per YAML section.
// Choices (a scheduler, a loss, a precision, an offload policy, ...) are parsed
// into enums here, once; the programs and the trainer use the parsed values.
//
// A YAML file is checked against the schema: an unknown key, a wrong type or
// an out-of-range value is a ConfigError whose one-line message names the
// file, the line and the key ("configs/darcy.yaml:12: model.hidden_channels:
// expected an integer >= 1, got 'abc'"). Overrides given as "section.key=value"
// (fno_train --set) are checked the same way and named "--set ...".
//
// Each key is declared once, in that table: its field here (a member pointer,
// or the model's option), its documentation, its range or check. Its type,
// words (an enum's to_string), reading and reference row follow from the
// field; its default is the field's default here (the model's, FNOOptions';
// the offload section's, offload's OffloadOptions and the engine's
// OffloadSettings). A new key: its field here, its line in the table. Each
// field's comment names its key; the schema's text (configs/README.md) says more.
#pragma once

#include <fno/fno.h>
#include <fno/precision.h>
#include <fno_data/darcy.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_offload/offload.h>
#include <fno_offload/planner.h>
#include <fno_train/distributed.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fno {

/// Replaces line breaks and other control characters with escapes ("\n"), so
/// that a message quoting user input stays on one line.
std::string one_line(const std::string& text);

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& what) : std::runtime_error(one_line(what)) {}
};

/// optimizer.name
enum class OptimizerName { kAdamW, kAdam };
/// scheduler.name: the lr schedule, stepped once per epoch.
enum class SchedulerName { kCosine, kStep, kPlateau, kNone };
/// training.loss and training.eval_losses: relative H1 or L2 (fno/losses.h).
enum class LossName { kH1, kL2 };
/// output.progress: a bar on a terminal (auto), a bar, log lines, or nothing.
enum class Progress { kAuto, kBar, kPlain, kNone };
/// data.problem: what the data files hold. kDarcy: input and output arrays
/// (Darcy, Poisson 3D; fno_data/darcy.h); kNavierStokes: vorticity records
/// u (N, R, R, T) made into pairs as data.ns_mode says (fno_data/navier_stokes.h).
enum class DataProblem { kDarcy, kNavierStokes };
/// data.ns_mode: how Navier-Stokes records train, as the FNO paper's two models.
/// kSpaceTime: a 3D FNO over (x, y, t), the t_in records in, the next t_out out
/// at once; kRecurrent: a 2D FNO from the last t_in records to the next one,
/// rolled out t_out times (fno_engine/rollout.h).
enum class NsMode { kSpaceTime, kRecurrent };
/// data.format: how the data files are laid out. kAuto: the loaders' own
/// detection (.pt, our HDF5, .mat; data.problem); kWell, kPdeBench, kPdeArena:
/// the benchmarks' files as they ship (fno_data/benchmark.h), trained as
/// next-step pairs from a time window (data.history, data.horizon).
enum class DataFormat { kAuto, kWell, kPdeBench, kPdeArena };
/// data.stream: benchmark formats: the training split's windows kept in host
/// memory (kOff), read from the files batch by batch (kOn), or streamed when
/// they exceed data.host_memory_limit (kAuto).
enum class DataStream { kAuto, kOn, kOff };
/// training.loss_on: what the training loss compares when outputs are normalized
/// (data.encode_output): the normalized output and truth (neuraloperator's
/// Trainer), or both decoded (the FNO paper's scripts). Metrics always decode.
enum class LossSpace { kNormalized, kDecoded };

/// The names the config uses: "adamw"; "cosine", "step", "plateau", "none";
/// "h1", "l2"; "auto", "bar", "plain", "none".
std::string to_string(OptimizerName name);
std::string to_string(SchedulerName name);
std::string to_string(LossName name);
std::string to_string(Progress progress);
using data::to_string;
/// "darcy", "ns"; "space_time", "recurrent".
std::string to_string(DataProblem problem);
std::string to_string(NsMode mode);
/// "auto", "well", "pdebench", "pdearena".
std::string to_string(DataFormat format);
/// "auto", "on", "off".
std::string to_string(DataStream stream);
/// "channel", "pointwise"; "normalized", "decoded"; "symmetric", "one_sided".
std::string to_string(data::NormalizerMode mode);
std::string to_string(LossSpace space);
std::string to_string(PaddingMode mode);
std::string to_string(SpectralInit init);

/// One entry of data.test: an evaluation set.
struct TestSetConfig {
  /// data.test[].file: the set's data file (.pt, .h5, .mat), resolved against the config's folder.
  std::string file;
  /// data.test[].name: the metric prefix ("32" gives 32_l2); '': the set's grid size.
  std::string name;
  /// data.test[].first: the set's first sample (0-based): samples [first, first + n_samples).
  int64_t first = 0;
  /// data.test[].n_samples: the first n samples (from `first`); -1: all.
  int64_t n_samples = -1;
  /// data.test[].batch_size: the evaluation batch size.
  int64_t batch_size = 32;
  /// data.test[].split: benchmark formats: the benchmark's split the set reads ('': test).
  std::string split;
};

/// The data section: the training set, the evaluation sets, normalization.
struct DataConfig {
  /// data.train_file: the training data file, resolved against the config's folder.
  std::string train_file;
  /// data.n_train: the first n training samples; -1: all.
  int64_t n_train = 1000;
  /// data.batch_size: the training batch size (per rank under torchrun).
  int64_t batch_size = 32;
  /// data.shuffle: reshuffle the training set each epoch (seeded by training.seed).
  bool shuffle = true;
  /// data.subsample: keep every k-th grid point of every set.
  int64_t subsample = 1;
  /// data.x_key: the input array's name ('': x in .pt, coeff in HDF5).
  std::string x_key;
  /// data.y_key: the output array's name ('': y in .pt, sol in HDF5).
  std::string y_key;
  /// data.x_layout, data.y_layout: the arrays' dims after the sample dim: a grid
  /// (one channel), or C channels first or last (fno_data/darcy.h).
  data::Layout x_layout = data::Layout::kGrid;
  data::Layout y_layout = data::Layout::kGrid;
  /// data.encode_input: normalize inputs.
  bool encode_input = false;
  /// data.encode_output: normalize outputs for training (metrics decode).
  bool encode_output = true;
  /// data.normalization: the statistics' layout: per channel (neuraloperator's)
  /// or per channel and grid point (the FNO paper's).
  data::NormalizerMode normalization = data::NormalizerMode::kChannel;
  /// data.test: the evaluation sets, in order; the first set's first metric picks the best
  /// checkpoint.
  std::vector<TestSetConfig> tests;
  /// data.n_predictions: test samples per set written to predictions.h5.
  int64_t n_predictions = 4;
  /// data.problem: what the files hold (the Darcy loader's x/y arrays, or
  /// Navier-Stokes records read by data.x_key, '' meaning u).
  DataProblem problem = DataProblem::kDarcy;
  /// data.ns_mode: Navier-Stokes only: space-time (3D FNO) or recurrent (2D FNO rollout).
  NsMode ns_mode = NsMode::kSpaceTime;
  /// data.t_in: Navier-Stokes only: the records given as input (the model's in_channels).
  int64_t t_in = 10;
  /// data.t_out: Navier-Stokes only: the records predicted after them; -1: all the
  /// training file has left (its T - t_in).
  int64_t t_out = -1;
  /// data.format: the files' layout (auto, or a benchmark's).
  DataFormat format = DataFormat::kAuto;
  /// data.split: benchmark formats: the benchmark's split that trains.
  std::string split = "train";
  /// data.fields: benchmark formats: the input fields, in channel order ([]: all).
  std::vector<std::string> fields;
  /// data.target_fields: benchmark formats: the output fields ([]: the
  /// time-varying input fields).
  std::vector<std::string> target_fields;
  /// data.history: benchmark formats: steps given as input.
  int64_t history = 1;
  /// data.horizon: benchmark formats: steps predicted after them.
  int64_t horizon = 1;
  /// data.scalars: benchmark formats: scalars given as inputs (The Well's
  /// scalars/, PDEArena's buo_y), each a channel constant in space after the fields'.
  std::vector<std::string> scalars;
  /// data.stream: benchmark formats: stream the training split's windows from the files.
  DataStream stream = DataStream::kAuto;
  /// data.host_memory_limit: the host bytes the training split's windows may
  /// take in memory before data.stream auto streams them (0: half of the
  /// memory available at the start).
  int64_t host_memory_limit = 0;
};

/// The optimizer section: neuraloperator's AdamW.
struct OptimizerConfig {
  /// optimizer.name: neuraloperator's AdamW, or torch.optim.Adam (the FNO paper's).
  OptimizerName name = OptimizerName::kAdamW;
  /// optimizer.lr: the learning rate.
  double lr = 1e-3;
  /// optimizer.weight_decay: AdamW's decoupled weight decay; Adam's L2 term.
  double weight_decay = 0.0;
  /// optimizer.betas[0]: the first moment's decay rate.
  double beta1 = 0.9;
  /// optimizer.betas[1]: the second moment's decay rate.
  double beta2 = 0.999;
  /// optimizer.eps: added to sqrt(second moment).
  double eps = 1e-6;
};

/// The scheduler section: the lr schedule, stepped once per epoch.
struct SchedulerConfig {
  /// scheduler.name: which schedule (kNone: a constant lr).
  SchedulerName name = SchedulerName::kCosine;
  /// scheduler.T_max: cosine: epochs of a half period.
  int64_t t_max = 30;
  /// scheduler.eta_min: cosine: the lowest lr.
  double eta_min = 0.0;
  /// scheduler.step_size: step: epochs between decays.
  int64_t step_size = 100;
  /// scheduler.gamma: step: the decay factor.
  double gamma = 0.5;
  /// scheduler.factor: plateau: the decay factor when the training loss stalls.
  double plateau_factor = 0.5;
  /// scheduler.patience: plateau: epochs without improvement before decaying.
  int64_t plateau_patience = 5;
};

/// The training section: epochs, losses, evaluation and checkpoint cadence, precision.
struct TrainingConfig {
  /// training.epochs: the number of epochs.
  int64_t epochs = 20;
  /// training.loss: the training loss (relative, summed over the batch).
  LossName loss = LossName::kH1;
  /// training.loss_on: normalized or decoded outputs (with data.encode_output).
  LossSpace loss_on = LossSpace::kNormalized;
  /// training.eval_losses: the evaluation metrics, in the config's order.
  std::vector<LossName> eval_losses{LossName::kH1, LossName::kL2};
  /// training.checkpoint_every: write the latest checkpoint every n epochs (and after the last).
  int64_t checkpoint_every = 1;
  /// training.eval_every: evaluate every n epochs (and after the last).
  int64_t eval_every = 1;
  /// training.seed: seeds the model initialization and the shuffling.
  int64_t seed = 0;
  /// training.precision: the compute precision (fno/precision.h).
  Precision precision = Precision::kFP32;
  /// training.cuda_graphs: each step (and evaluation) as CUDA graphs where they
  /// work (fno_engine/graphed_step.h); off: eager steps.
  CudaGraphs cuda_graphs = CudaGraphs::kAuto;
  /// training.max_grad_norm: clip the gradients to this total 2-norm before
  /// each optimizer step, and log the norms (TrainStep::set_max_grad_norm); 0: off.
  double max_grad_norm = 0;
};

/// The device section.
struct DeviceConfig {
  /// device.name: "auto" (CUDA when available), "cpu", "cuda" or "cuda:N" (checked at parse).
  std::string name = "auto";
};

/// The output section.
struct OutputConfig {
  /// output.dir: the run directory (relative to the working directory); fno_train --out overrides.
  std::string dir = "runs/darcy";
  /// output.progress: how epochs are shown on stderr (rank 0).
  Progress progress = Progress::kAuto;
  /// output.progress_every: plain progress within an epoch: seconds between lines
  /// (the first after half of it).
  double progress_every = 10;
};

/// The offload section: where the activations saved for backward live, and
/// auto's memory budget. fno_bench takes the same struct from its flags. The
/// defaults are those of the engine's OffloadSettings and offload's
/// OffloadOptions, in their units.
struct OffloadConfig {
  /// offload.policy: the activation memory policy (offload/planner.h), parsed; .text as given.
  offload::Policy policy;
  /// offload.gpu_memory_limit: the GPU memory, in bytes, the run may take ('' in YAML: 0).
  /// 0 means no limit was given; then each quantity drawn from it falls back to
  /// the device's own figure, one function each (fno_engine/offload_step.h):
  /// auto's budget is the free memory (resolve_gpu_budget), the learning
  /// back-pressure window stays within 90% of what the process can hold
  /// (inflight_memory_ceiling), out-of-memory advice measures against the device's
  /// total (oom_capacity), and the run's data stays on the GPU below a quarter of
  /// the device's total, with a limit below an eighth of it (resident_data_room).
  int64_t gpu_memory_limit = OffloadSettings().gpu_memory_limit;
  /// offload.host_memory_limit: pinned host bytes at most ('' in YAML: 0, no limit).
  int64_t host_memory_limit = offload::OffloadOptions().host_memory_limit();
  /// offload.chunks: batch chunks per stage for the fixed policies.
  int64_t chunks = OffloadSettings().chunks;
  /// offload.micro_batches: micro-batches per step for the fixed policies.
  int64_t micro_batches = OffloadSettings().micro_batches;
  /// offload.min_bytes: saved tensors smaller than this stay on the GPU.
  int64_t min_bytes = offload::OffloadOptions().min_bytes();
  /// offload.prefetch_depth: backward prefetches this many stages ahead.
  int64_t prefetch_depth = offload::OffloadOptions().prefetch_depth();
  /// offload.max_inflight_mib: the back-pressure window in MiB; 0 (auto in YAML):
  /// OffloadOptions' max_inflight_bytes, learning.
  int64_t max_inflight_mib = 0;
  /// offload.max_prefetch_mib: prefetched, not yet used MiB at most.
  int64_t max_prefetch_mib = offload::OffloadOptions().max_prefetch_bytes() >> 20;
  /// offload.timeline: write memory_timeline.csv (one training step's GPU memory).
  bool timeline = true;
  /// offload.compress: host storage of offloaded float32 activations.
  offload::Compress compress = offload::OffloadOptions().compress();
  /// offload.plan_cache: auto's plan cache ('': the default cache, 'none': no cache).
  /// (fno_bench --plan-cache names a directory; '' there: no cache.)
  std::string plan_cache;
  /// offload.search_seconds: seconds auto's measured plan search may take (fno_bench
  /// --search-seconds; OffloadSettings::search_seconds).
  double search_seconds = OffloadSettings().search_seconds;
};

/// The distributed section: several processes under torchrun (fno_train/distributed.h).
struct DistributedConfig {
  /// distributed.backend: the c10d backend (auto: NCCL on CUDA, Gloo on the CPU).
  dist::Backend backend = dist::Backend::kAuto;
  /// distributed.timeout_s: seconds a rank waits for the others before it stops with an error.
  double timeout_s = 300;
  /// distributed.bucket_mib: MiB of gradients per all-reduce bucket.
  double bucket_mib = 4;
  /// distributed.domain_parallel: the ranks that share one sample, each a band
  /// of rows (fno_train/domain.h); it divides the world size.
  int64_t domain_parallel = 1;
};

/// A run's configuration: one struct per YAML section.
struct RunConfig {
  /// The model section (model.n_modes, model.hidden_channels, ...), as the model takes it.
  FNOOptions model{{16, 16}, 1, 1, 32};
  /// model.domain_padding_auto: The Well: when > 0, the trainer sets
  /// model.domain_padding per spatial dim from the files' boundary conditions:
  /// 0 along a periodic dim, this fraction along the others (config.yaml
  /// records the padding chosen, and this key as 0).
  double domain_padding_auto = 0;
  DataConfig data;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  TrainingConfig training;
  DeviceConfig device;
  OutputConfig output;
  OffloadConfig offload;
  DistributedConfig distributed;

  /// Directory the config file was read from; relative data paths resolve against it.
  std::string base_dir = ".";
  /// The resolved configuration (every key, defaults filled in) as YAML.
  std::string resolved_yaml;
  /// One line each about settings that were accepted but do less than they may
  /// seem to (an option the offload policy ignores, a byte size's unit, the
  /// training file replaced on the command line while the config's test sets
  /// remain); fno_train prints them.
  std::vector<std::string> notes;
};

/// Sets `key` ("offload.policy") of the resolved YAML to the plain word `value`,
/// so that config.yaml records what ran (the typed field is the caller's).
void record_setting(RunConfig& config, const std::string& key, const std::string& value);

/// Reads and validates a YAML config file, applies `overrides` ("a.b=value"),
/// and resolves relative file paths against the config file's directory (those
/// given in `overrides`, against the current directory).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same, from YAML text; `origin` names it in errors.
RunConfig parse_config(const std::string& yaml, const std::string& origin,
                       const std::vector<std::string>& overrides = {});

/// The schema as a Markdown reference (every key, type, default and meaning).
std::string config_schema_markdown();

/// A key of the schema: its name ("model.n_modes", "data.test[].file"), its
/// documentation, and a valid value other than its default as YAML text (the
/// tests set every key to it).
struct ConfigKey {
  std::string key;
  std::string doc;
  std::string sample;
};

/// Every key of the schema, in the schema's order: the sections' keys, then
/// those of a data.test entry.
std::vector<ConfigKey> config_keys();

/// offload.max_inflight_mib (and fno_bench --max-inflight-mib): "auto" gives 0,
/// a whole number of MiB in [1, 2^30] gives itself; else std::invalid_argument
/// naming the text.
int64_t parse_inflight_mib(const std::string& text);

}  // namespace fno
