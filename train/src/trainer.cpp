#include <fno_train/trainer.h>

#include <fno/fno.h>
#include <fno/optim.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>
#include <fno_data/fingerprint.h>
#include <fno_data/navier_stokes.h>
#include <fno_train/background_writer.h>
#include <fno_train/distributed.h>
#include <fno_train/graphed_step.h>
#include <fno_train/offload_step.h>
#include <fno_train/rollout.h>
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
#include <sstream>

#include "dict_prefix.h"
#include "json.h"

namespace fno {

namespace {

using detail::with_prefix;

using Clock = std::chrono::steady_clock;

using JsonObject = json::Object;

std::string metrics_json(const std::map<std::string, double>& m) {
  JsonObject o;
  for (const auto& [k, v] : m) o.num(k, v);
  return o.text();
}

void make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      throw std::runtime_error(path + ": cannot create the run directory: " + std::strerror(errno));
    }
  }
  if (::access(path.c_str(), W_OK) != 0) {
    throw std::runtime_error(path + ": the run directory is not writable: " + std::strerror(errno));
  }
}

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
int64_t host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

// Under torchrun each rank trains on GPU LOCAL_RANK (`cuda` and `auto` name
// no index then; an explicit cuda:N is taken as given).
torch::Device pick_device(const std::string& name, int64_t local_rank) {
  if (name == "cpu") return torch::kCPU;
  if (name == "auto" && !torch::cuda::is_available()) return torch::kCPU;
  if ((name == "auto" || name == "cuda") && local_rank >= 0) {
    if (local_rank >= static_cast<int64_t>(torch::cuda::device_count())) {
      throw std::runtime_error("device.name: LOCAL_RANK " + std::to_string(local_rank) +
                               " needs GPU " + std::to_string(local_rank) + ", but only " +
                               std::to_string(torch::cuda::device_count()) +
                               " CUDA device(s) are visible");
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  }
  if (name == "auto") return torch::Device(torch::kCUDA, 0);
  if (!torch::cuda::is_available()) {
    throw std::runtime_error("device.name: '" + name +
                             "' asked for, but no CUDA device is visible");
  }
  torch::Device d(name);
  if (d.index() < 0) d = torch::Device(torch::kCUDA, 0);
  if (d.index() >= static_cast<int>(torch::cuda::device_count())) {
    throw std::runtime_error("device.name: '" + name + "', but only " +
                             std::to_string(torch::cuda::device_count()) +
                             " CUDA device(s) are visible");
  }
  return d;
}

// One evaluation set, on the training device when it fits.
struct EvalSet {
  std::string name;
  int64_t batch_size;
  torch::Tensor x;      // normalized input when encode_input (Navier-Stokes: the t_in records)
  torch::Tensor x_raw;  // as loaded (for predictions.h5), on the CPU
  torch::Tensor y;      // raw truth
};

// A Navier-Stokes file's pairs as the trainer keeps them: x the t_in input
// records [N, t_in, R, R] in both modes (space-time inputs are made per batch,
// State::model_input), y the next t_out records as the model predicts them:
// [N, 1, R, R, t_out] (space_time) or [N, t_out, R, R] (recurrent). `t_out`
// -1 takes the rest of the file's records.
data::FieldPairs load_ns_pairs(const std::string& file, const DataConfig& d, int64_t n_samples,
                               int64_t t_out) {
  const auto u = data::load_ns_records(file, data::NsLoadOptions()
                                                 .key(d.x_key.empty() ? "u" : d.x_key)
                                                 .n_samples(n_samples)
                                                 .subsample(d.subsample)
                                                 .t_in(d.t_in)
                                                 .t_out(t_out));
  auto pairs = data::ns_recurrent_pairs(u, d.t_in, t_out > 0 ? t_out : u.size(3) - d.t_in);
  // [N, t_out, R, R] -> [N, 1, R, R, t_out], as ns_space_time_pairs' y
  if (d.ns_mode == NsMode::kSpaceTime) pairs.y = pairs.y.permute({0, 2, 3, 1}).unsqueeze(1);
  pairs.y = pairs.y.contiguous();
  return pairs;
}

// The loader's options for a file of the data section: its arrays by name and
// layout, their keys named in a missing array's error.
data::LoadOptions load_options(const DataConfig& d, int64_t n_samples) {
  return data::LoadOptions()
      .n_samples(n_samples)
      .subsample(d.subsample)
      .x_key(d.x_key)
      .y_key(d.y_key)
      .x_layout(d.x_layout)
      .y_layout(d.y_layout)
      .x_key_setting("data.x_key")
      .y_key_setting("data.y_key");
}

}  // namespace

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
  data::UnitGaussianNormalizer in_norm, out_norm;
  torch::Tensor train_x, train_y;  // normalized as configured
  std::vector<EvalSet> tests;
  int64_t start_epoch = 0;    // epochs already done
  int64_t start_batch = 0;    // batches of epoch start_epoch+1 already done (an interrupted epoch)
  double start_loss_sum = 0;  // their summed loss (over all ranks)
  int64_t start_samples = 0;  // and their samples (over all ranks)
  double best = std::numeric_limits<double>::infinity();
  std::string best_key;

  std::string path(const std::string& name) const { return run_dir + "/" + name; }

  // Navier-Stokes (data.problem ns): the predicted records per sample (0 otherwise).
  int64_t ns_t_out = 0;
  bool ns() const { return cfg.data.problem == DataProblem::kNavierStokes; }
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
  void place_data();
  void build_model();
  void build_offload();
  void build_optimizer();
  void use_cuda_graphs();
};

// Rank and world size under torchrun; the run directory (rank 0 alone writes
// it); the device; the process group.
void Trainer::State::join_ranks() {
  const auto launch = dist::launch_env();
  if (launch && launch->world_size > 1) {
    rank = launch->rank;
    world_size = launch->world_size;
  }
  // Before any rank waits for another: every rank refuses alike.
  if (const int64_t n = cfg.distributed.domain_parallel; n > 1) {
    if (world_size % n != 0) {
      throw ConfigError("distributed.domain_parallel: " + std::to_string(n) +
                        " does not divide the world size " + std::to_string(world_size) +
                        " (the ranks that share one sample; run under torchrun with a multiple "
                        "of it)");
    }
    throw ConfigError("distributed.domain_parallel: " + std::to_string(n) +
                      ": fno_train trains data parallel only for now (domain_parallel: 1); "
                      "fno_bench --domain-parallel " +
                      std::to_string(n) + " measures the split step");
  }
  if (main()) make_dirs(run_dir);
  device = pick_device(cfg.device.name, world_size > 1 ? launch->local_rank : -1);
  if (world_size > 1) {
    dist::GroupOptions go;
    go.backend = cfg.distributed.backend;
    go.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(cfg.distributed.timeout_s * 1000.0));
    group = dist::Group::create(*launch, device, go);
  }
}

// Data: validated at load; inputs normalized if configured, outputs normalized for training.
void Trainer::State::load_data() {
  const auto& c = cfg;
  data::FieldPairs train;
  if (ns()) {
    train = load_ns_pairs(c.data.train_file, c.data, c.data.n_train, c.data.t_out);
    ns_t_out = recurrent() ? train.y.size(1) : train.y.size(4);
    check_ns_model();
  } else {
    train = data::load_darcy(c.data.train_file, load_options(c.data, c.data.n_train));
  }
  const int64_t n_dim = static_cast<int64_t>(c.model.n_modes().size());
  if (!ns() && train.x.dim() != n_dim + 2) {
    // (N, C, R1, R2) read as a grid is a 3D grid: the layout setting says otherwise.
    const bool channels = c.data.x_layout == data::Layout::kGrid && train.x.dim() == n_dim + 3;
    throw std::runtime_error(
        c.data.train_file + ": data has " + std::to_string(train.x.dim() - 2) +
        " spatial dims but model.n_modes has " + std::to_string(n_dim) +
        (channels ? " (an array (N, C, *S) of C channels: set data.x_layout: channels_first, "
                    "and data.y_layout as the outputs are)"
                  : ""));
  }
  if (!ns() &&
      (train.x.size(1) != c.model.in_channels() || train.y.size(1) != c.model.out_channels())) {
    const bool x_bad = train.x.size(1) != c.model.in_channels();
    throw std::runtime_error(
        c.data.train_file + ": data has " + std::to_string(train.x.size(1)) + " input and " +
        std::to_string(train.y.size(1)) + " output channels; the model expects " +
        std::to_string(c.model.in_channels()) + " and " + std::to_string(c.model.out_channels()) +
        " (set " + (x_bad ? "model.in_channels" : "model.out_channels") + " to " +
        std::to_string(x_bad ? train.x.size(1) : train.y.size(1)) + ")");
  }
  in_norm = data::UnitGaussianNormalizer(c.data.normalization);
  out_norm = data::UnitGaussianNormalizer(c.data.normalization);
  if (c.data.encode_input) in_norm.fit(train.x);
  if (c.data.encode_output) out_norm.fit(train.y);
  train_x = c.data.encode_input ? in_norm.transform(train.x) : train.x;
  train_y = c.data.encode_output ? out_norm.transform(train.y) : train.y;
  load_test_sets(train);
}

// The model section against Navier-Stokes pairs: the dimension data.ns_mode
// trains, t_in input channels, one output channel.
void Trainer::State::check_ns_model() const {
  const auto& c = cfg;
  const int64_t n_dim = static_cast<int64_t>(c.model.n_modes().size());
  const int64_t want = recurrent() ? 2 : 3;
  if (n_dim != want) {
    throw std::runtime_error(c.data.train_file + ": data.ns_mode " + to_string(c.data.ns_mode) +
                             " trains a " + std::to_string(want) + "D FNO over " +
                             (recurrent() ? "(x, y)" : "(x, y, t)") + ", but model.n_modes has " +
                             std::to_string(n_dim) + " entries");
  }
  if (c.model.in_channels() != c.data.t_in || c.model.out_channels() != 1) {
    throw std::runtime_error(c.data.train_file + ": data.t_in " + std::to_string(c.data.t_in) +
                             " records in and one record out need model.in_channels " +
                             std::to_string(c.data.t_in) + " and model.out_channels 1, got " +
                             std::to_string(c.model.in_channels()) + " and " +
                             std::to_string(c.model.out_channels()));
  }
}

// data.test: each set as loaded (for predictions.h5), normalized like the training inputs.
void Trainer::State::load_test_sets(const data::FieldPairs& train) {
  const auto& d = cfg.data;
  for (const auto& t : d.tests) {
    data::FieldPairs pairs;
    if (ns()) {
      pairs = load_ns_pairs(t.file, d, t.n_samples, ns_t_out);
    } else {
      pairs = data::load_darcy(t.file, load_options(d, t.n_samples));
    }
    if (pairs.x.dim() != train.x.dim() || pairs.x.size(1) != train.x.size(1) ||
        pairs.y.size(1) != train.y.size(1)) {
      throw std::runtime_error(t.file + ": test data of shape " + c10::str(pairs.x.sizes()) +
                               " does not match the training data " + c10::str(train.x.sizes()));
    }
    EvalSet e;
    e.name = t.name.empty() ? std::to_string(pairs.x.size(2)) : t.name;
    for (const auto& other : tests) {
      if (other.name == e.name) {
        throw std::runtime_error(t.file + ": a second test set named '" + e.name +
                                 "'; give data.test entries distinct names");
      }
    }
    e.batch_size = t.batch_size;
    e.x_raw = pairs.x;
    e.x = d.encode_input ? in_norm.transform(pairs.x) : pairs.x;
    e.y = pairs.y;
    tests.push_back(std::move(e));
  }
}

// Keep the data on the GPU when it fits comfortably (resident_data_room: the
// run's data count in a budget); else in pinned host memory, each batch
// copied over as it is used.
void Trainer::State::place_data() {
  if (!device.is_cuda()) return;
  int64_t bytes = train_x.nbytes() + train_y.nbytes();
  for (const auto& e : tests) bytes += e.x.nbytes() + e.y.nbytes();
  const auto* props = at::cuda::getDeviceProperties(device.index());
  const int64_t room =
      resident_data_room(cfg.offload.gpu_memory_limit, static_cast<int64_t>(props->totalGlobalMem));
  const bool fits = bytes < room;
  auto place = [&](torch::Tensor& t) { t = fits ? t.to(device) : t.pin_memory(); };
  place(train_x);
  place(train_y);
  for (auto& e : tests) {
    place(e.x);
    place(e.y);
  }
  in_norm.to(device);
  out_norm.to(device);
}

// The model in the run's precision, rank 0's weights on every rank, the
// gradient all-reduce, fp16's loss scaler.
void Trainer::State::build_model() {
  torch::manual_seed(static_cast<uint64_t>(cfg.training.seed));
  precision = cfg.training.precision;
  matmul_precision = std::make_unique<MatmulPrecisionGuard>(precision);
  // The weights are created (and kept) in fp32 whatever the precision: the
  // same seed gives the same initial model in every precision.
  model = FNO(FNOOptions(cfg.model).compute_dtype(compute_dtype(precision)));
  model->to(device);
  if (group) {
    // DDP: every rank starts from rank 0's weights, and reduces its gradients
    // in buckets during backward.
    group->broadcast_from_main(model->parameters());
    grad_sync = std::make_unique<dist::GradientSync>(
        group, model->parameters(),
        dist::GradientSyncOptions{static_cast<int64_t>(cfg.distributed.bucket_mib * 1048576.0)});
  }
  if (needs_loss_scaling(precision)) {
    scaler = std::make_unique<GradScaler>(GradScalerOptions(), device);
  }
}

// The forward and backward under the offload policy.
void Trainer::State::build_offload() {
  OffloadSettings offload = offload_settings(cfg.offload, PlanCacheText::kConfigKey);
  if (group && group->local_size() > 1 && offload.options.host_memory_limit() == 0) {
    // The ranks of a machine share its pinned host memory: without a limit
    // each takes an equal share of three quarters of what is available now
    // (beyond it, activations stay on the GPU; auto measures that).
    const int64_t share = host_available_bytes() * 3 / 4 / group->local_size();
    if (share > 0) offload.options.host_memory_limit(share);
  }
  if (!device.is_cuda()) {
    // Without a GPU no activation moves to host memory (auto fits plans into
    // GPU memory): the policy that runs is the one without the moves, and
    // config.yaml records it.
    using K = offload::Policy::Kind;
    const auto kind = offload.policy.kind;
    std::string runs;
    if (kind == K::kAll || kind == K::kBlocks || kind == K::kAuto) runs = "none";
    if (kind == K::kRecomputeOffload) runs = "recompute";
    if (!runs.empty()) {
      if (main()) {
        std::fprintf(stderr,
                     "fno_train: offload.policy %s: no CUDA device, so nothing is offloaded; "
                     "training with offload.policy %s (config.yaml records it)\n",
                     offload.policy.text.c_str(), runs.c_str());
      }
      offload.policy = offload::parse_policy(runs);
      cfg.offload.policy = offload.policy;
      record_setting(cfg, "offload.policy", runs);
    }
  }
  // Each rank plans for its own GPU; rank 0 keeps its plan in the run directory.
  offload.plan_file = main() ? path("offload_plan.txt") : std::string();
  step = std::make_unique<OffloadedStep>(model, std::move(offload));
}

// AdamW, the lr schedule, the training step, the metric that picks the best checkpoint.
void Trainer::State::build_optimizer() {
  const auto& o = cfg.optimizer;
  optimizer =
      std::make_unique<AdamW>(model->parameters(), AdamWOptions(o.lr)
                                                       .betas({o.beta1, o.beta2})
                                                       .eps(o.eps)
                                                       .weight_decay(o.weight_decay)
                                                       .torch_adam(o.name == OptimizerName::kAdam));
  const auto& sc = cfg.scheduler;
  if (sc.name == SchedulerName::kCosine) {
    scheduler = std::make_unique<CosineAnnealingLR>(*optimizer, sc.t_max, sc.eta_min);
  } else if (sc.name == SchedulerName::kStep) {
    scheduler = std::make_unique<StepLR>(*optimizer, sc.step_size, sc.gamma);
  } else if (sc.name == SchedulerName::kPlateau) {
    scheduler = std::make_unique<ReduceLROnPlateau>(
        *optimizer,
        ReduceLROnPlateauOptions().factor(sc.plateau_factor).patience(sc.plateau_patience));
  }
  train_step = std::make_unique<TrainStep>(
      *step, *optimizer,
      training_loss(cfg.training, static_cast<int64_t>(cfg.model.n_modes().size()), &out_norm),
      scaler.get(), grad_sync.get());
  // The recurrent Navier-Stokes model trains on its rollout (the loss of every step).
  if (recurrent()) train_step->set_rollout(ns_t_out);
  if (cfg.training.max_grad_norm > 0) train_step->set_max_grad_norm(cfg.training.max_grad_norm);
  use_cuda_graphs();
  if (!tests.empty()) {
    best_key = tests.front().name + "_" + to_string(cfg.training.eval_losses.front());
  }
}

// training.cuda_graphs: the step (and evaluation, TrainingRun) as CUDA graphs
// where they work; else eager steps, with at most one line saying why.
void Trainer::State::use_cuda_graphs() {
  GraphConditions gc;
  gc.mode = cfg.training.cuda_graphs;
  gc.device = device;
  gc.offload_policy = cfg.offload.policy.text;
  gc.micro_batches = cfg.offload.micro_batches;
  gc.world_size = world_size;
  if (group) gc.backend = group->backend_name();
  auto decision = decide_cuda_graphs(gc);
  if (decision.use) {
    try {
      train_step->enable_cuda_graphs(TrainStep::kGraphWarmup,
                                     gc.mode == CudaGraphs::kAuto ? auto_capture_limit_ms() : 0);
    } catch (const std::invalid_argument& e) {
      decision.message =
          "training.cuda_graphs " + to_string(gc.mode) + ": " + e.what() + "; steps run eagerly";
    }
  }
  if (!decision.message.empty() && main()) {
    std::fprintf(stderr, "fno_train: %s\n", decision.message.c_str());
  }
}

Trainer::Trainer(RunConfig config, std::string run_dir) : s_(std::make_unique<State>()) {
  auto& s = *s_;
  s.cfg = std::move(config);
  s.run_dir = std::move(run_dir);
  s.join_ranks();
  s.load_data();
  s.place_data();
  s.build_model();
  s.build_offload();
  s.build_optimizer();
}

Trainer::~Trainer() = default;

int64_t Trainer::n_params() const { return count_params(*s_->model); }

const RunConfig& Trainer::config() const { return s_->cfg; }

int64_t Trainer::rank() const { return s_->rank; }

std::string Trainer::describe() const {
  const auto& s = *s_;
  std::ostringstream o;
  if (s.group) {
    o << "rank " << s.rank << " of " << s.world_size << " (" << s.group->backend_name()
      << ", batch " << s.cfg.data.batch_size << " per rank) | ";
  }
  o << "device " << s.device << " | precision " << to_string(s.precision) << " | ";
  if (s.cfg.offload.policy.kind != offload::Policy::Kind::kNone) o << s.step->describe() << " | ";
  if (s.train_step->cuda_graphs()) o << "CUDA graphs | ";
  s.model->pretty_print(o);
  o << ", " << n_params() << " parameters | train " << s.train_x.sizes();
  for (const auto& e : s.tests) o << ", test " << e.name << " " << e.x.sizes();
  if (s.in_norm.fitted() || s.out_norm.fitted()) {
    o << " | " << to_string(s.cfg.data.normalization) << " normalization";
    if (s.out_norm.fitted()) o << ", loss on " << to_string(s.cfg.training.loss_on) << " outputs";
  }
  o << " | " << (s.cfg.optimizer.name == OptimizerName::kAdam ? "Adam" : "AdamW")
    << "(lr=" << s.cfg.optimizer.lr << ", weight_decay=" << s.cfg.optimizer.weight_decay
    << ", eps=" << s.cfg.optimizer.eps << ")";
  if (s.scheduler) o << " | " << s.scheduler->describe();
  return o.str();
}

namespace {

// Keys of the checkpoint file.
constexpr const char* kEpochKey = "meta.epoch";
constexpr const char* kBestKey = "meta.best";
constexpr const char* kBatchKey = "meta.batch";       // batches done of the next epoch
constexpr const char* kLossSumKey = "meta.loss_sum";  // and their summed loss (all ranks)
constexpr const char* kSamplesKey = "meta.samples";   // and their samples (all ranks)
constexpr const char* kWorldKey = "meta.world_size";  // ranks of the run that wrote it

// The signal that asked the run to stop (SIGINT, SIGTERM), or 0.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// Installs the stop handlers for its lifetime, restoring the previous ones.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

TensorDict checkpoint_dict(Trainer::State& s, int64_t epoch, int64_t batch = 0, double loss_sum = 0,
                           int64_t samples = 0) {
  TensorDict d;
  for (const auto& item : state_dict(*s.model)) d.insert("model." + item.key(), item.value());
  for (const auto& item : s.optimizer->state_dict()) d.insert("optim." + item.key(), item.value());
  if (s.scheduler) {
    for (const auto& item : s.scheduler->state_dict())
      d.insert("sched." + item.key(), item.value());
  }
  if (s.in_norm.fitted()) {
    for (const auto& [k, v] : s.in_norm.state("norm.in.")) d.insert(k, v);
  }
  if (s.out_norm.fitted()) {
    for (const auto& [k, v] : s.out_norm.state("norm.out.")) d.insert(k, v);
  }
  d.insert("rng.cpu", torch::globalContext().defaultGenerator(torch::kCPU).get_state());
  d.insert(kEpochKey, torch::tensor(epoch, torch::kInt64));
  d.insert(kBatchKey, torch::tensor(batch, torch::kInt64));
  d.insert(kLossSumKey, torch::tensor(loss_sum, torch::kFloat64));
  d.insert(kSamplesKey, torch::tensor(samples, torch::kInt64));
  d.insert(kWorldKey, torch::tensor(s.world_size, torch::kInt64));
  d.insert(kBestKey, torch::tensor(s.best, torch::kFloat64));
  if (s.scaler) {
    for (const auto& [k, v] : s.scaler->state()) d.insert("scaler." + k, v);
  }
  return d;
}

// normalizers.pt: norm.in.* and norm.out.* of the fitted normalizers and
// norm.pointwise (1: data.normalization pointwise), on the CPU; empty when none is fitted.
TensorDict normalizers_dict(const Trainer::State& s) {
  TensorDict d;
  for (const auto* norm : {&s.in_norm, &s.out_norm}) {
    if (!norm->fitted()) continue;
    for (const auto& [k, v] : norm->state(norm == &s.in_norm ? "norm.in." : "norm.out."))
      d.insert(k, v.detach().cpu().clone());
  }
  if (!d.is_empty()) {
    const bool pointwise = s.cfg.data.normalization == data::NormalizerMode::kPointwise;
    d.insert("norm.pointwise", torch::tensor(pointwise ? 1 : 0, torch::kInt64));
  }
  return d;
}

}  // namespace

namespace {

constexpr const char* kInputsFile = "inputs.txt";

/// The data files a run reads, by config key: (key, path).
std::vector<std::pair<std::string, std::string>> input_files(const RunConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> files{{"data.train_file", cfg.data.train_file}};
  for (size_t i = 0; i < cfg.data.tests.size(); ++i) {
    files.emplace_back("data.test[" + std::to_string(i) + "].file", cfg.data.tests[i].file);
  }
  return files;
}

/// inputs.txt: one line per data file, "KEY<tab>PATH<tab>FINGERPRINT".
std::string inputs_text(const RunConfig& cfg) {
  std::string text;
  for (const auto& [key, path] : input_files(cfg)) {
    text += key + "\t" + path + "\t" + data::to_string(data::file_fingerprint(path)) + "\n";
  }
  return text;
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::string run_file_in(const std::string& dir) {
  for (const char* name :
       {"checkpoint_latest.pt", "checkpoint_previous.pt", "checkpoint_best.pt", "metrics.jsonl",
        "model.pt", "predictions.h5", kInputsFile, "telemetry.jsonl", "memory_timeline.csv"}) {
    if (file_exists(dir + "/" + name)) return name;
  }
  // A dry run writes config.yaml and a summary.json that says so.
  std::ifstream summary(dir + "/summary.json");
  const std::string text((std::istreambuf_iterator<char>(summary)),
                         std::istreambuf_iterator<char>());
  if (summary.is_open() && text.find("\"dry_run\": true") == std::string::npos) {
    return "summary.json";
  }
  if (!summary.is_open() && file_exists(dir + "/config.yaml")) return "config.yaml";
  return "";
}

void check_run_inputs(const RunConfig& cfg, const std::string& run_dir) {
  const std::string inputs = run_dir + "/" + kInputsFile;
  std::ifstream in(inputs);
  if (!in) return;                                                   // a run from before inputs.txt
  std::map<std::string, std::pair<std::string, std::string>> began;  // key -> (path, fingerprint)
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find('\t'), b = line.find('\t', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      throw ConfigError(inputs + ": damaged line '" + line +
                        "'; restore it, or remove it to resume without the check");
    }
    began[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), line.substr(b + 1)};
  }
  const auto now = input_files(cfg);
  for (const auto& [key, path] : now) {
    const auto it = began.find(key);
    if (it == began.end()) {
      throw ConfigError("resume: " + key + " " + in_quotes(path) + " is not a file of the run " +
                        run_dir + "; resume with the run's data, or start a new run");
    }
    if (it->second.first != path) {
      throw ConfigError("resume: " + key + " is " + in_quotes(path) + ", the run " + run_dir +
                        " began with " + in_quotes(it->second.first) +
                        "; resume with the run's data, or start a new run");
    }
    const std::string fingerprint = data::to_string(data::file_fingerprint(path));
    if (fingerprint != it->second.second) {
      throw ConfigError("resume: " + key + " " + in_quotes(path) + " changed since the run " +
                        run_dir + " began (then " + it->second.second + "; now " + fingerprint +
                        "); restore it, or start a new run");
    }
  }
  if (began.size() != now.size()) {
    for (const auto& [key, file] : began) {
      bool found = false;
      for (const auto& n : now) found = found || n.first == key;
      if (!found) {
        throw ConfigError("resume: the run " + run_dir + " began with " + key + " " +
                          in_quotes(file.first) +
                          ", this config has none; resume with the run's data");
      }
    }
  }
}

int64_t Trainer::resume() {
  auto& s = *s_;
  // The latest checkpoint, or the one before it when the latest is missing or
  // damaged (a crash between rotating and writing, a bad disk).
  TensorDict d;
  std::string used, problems;
  for (const std::string name : {"checkpoint_latest.pt", "checkpoint_previous.pt"}) {
    const std::string ckpt = s.path(name);
    if (!file_exists(ckpt)) {
      problems += (problems.empty() ? "" : "; ") + name + " missing";
      continue;
    }
    try {
      d = load_checkpoint_file(ckpt);
      used = ckpt;
      break;
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      problems += (problems.empty() ? "" : "; ") + msg.substr(0, msg.find('\n'));
      std::fprintf(stderr, "fno_train: warning: %s\n", msg.substr(0, msg.find('\n')).c_str());
    }
  }
  if (used.empty())
    throw TrainingError(s.run_dir + ": no usable checkpoint to resume from (" + problems + ")");
  const std::string ckpt = used;
  try {
    const auto* epoch = d.find(kEpochKey);
    if (epoch == nullptr) throw std::runtime_error("no " + std::string(kEpochKey));
    load_state_dict(*s.model, with_prefix(d, "model."));
    s.optimizer->load_state_dict(with_prefix(d, "optim."));
    if (s.scheduler) s.scheduler->load_state_dict(with_prefix(d, "sched."));
    if (s.scaler) {
      // A checkpoint of another precision has no scaler state: start from the initial scale.
      std::vector<std::pair<std::string, torch::Tensor>> scaler_state;
      for (const auto& item : with_prefix(d, "scaler."))
        scaler_state.emplace_back(item.key(), item.value());
      s.scaler->load_state(scaler_state);
    }
    if (const auto* m = d.find("norm.in.mean"))
      s.in_norm.set_state(m->to(s.device), d["norm.in.std"].to(s.device));
    if (const auto* m = d.find("norm.out.mean"))
      s.out_norm.set_state(m->to(s.device), d["norm.out.std"].to(s.device));
    if (const auto* r = d.find("rng.cpu")) {
      auto gen = torch::globalContext().defaultGenerator(torch::kCPU);
      gen.set_state(*r);
    }
    if (const auto* b = d.find(kBestKey)) s.best = b->item<double>();
    s.start_epoch = epoch->item<int64_t>();
    if (const auto* b = d.find(kBatchKey)) s.start_batch = b->item<int64_t>();
    if (const auto* l = d.find(kLossSumKey)) s.start_loss_sum = l->item<double>();
    s.start_samples = s.start_batch * s.cfg.data.batch_size;  // (checkpoints before meta.samples)
    if (const auto* n = d.find(kSamplesKey)) s.start_samples = n->item<int64_t>();
    const auto* w = d.find(kWorldKey);
    const int64_t old_world = w != nullptr ? w->item<int64_t>() : 1;
    if (s.start_batch > 0 && old_world != s.world_size) {
      // An interrupted epoch, continued by another number of ranks: the
      // samples done (the first ones of the epoch's order, over all ranks)
      // become whole batches of the new global batch, rounded down; the
      // samples past that boundary are trained again.
      const int64_t global = s.cfg.data.batch_size * s.world_size;
      const int64_t done = s.start_samples / global * global;
      if (done != s.start_samples && s.main()) {
        std::fprintf(
            stderr,
            "fno_train: the checkpoint was written by %lld rank(s), this run has %lld: epoch %lld "
            "continues after %lld of its %lld samples done\n",
            static_cast<long long>(old_world), static_cast<long long>(s.world_size),
            static_cast<long long>(s.start_epoch + 1), static_cast<long long>(done),
            static_cast<long long>(s.start_samples));
      }
      if (done != s.start_samples && s.start_samples > 0) {
        s.start_loss_sum *= static_cast<double>(done) / static_cast<double>(s.start_samples);
      }
      s.start_samples = done;
      s.start_batch = done / global;
    }
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    throw TrainingError(ckpt + ": unusable checkpoint: " + msg.substr(0, msg.find('\n')));
  }
  // Drop metrics lines of epochs after the checkpoint (a killed run may have logged them).
  if (!s.main()) return s.start_epoch;
  const std::string metrics = s.path("metrics.jsonl");
  std::ifstream in(metrics);
  std::string line, kept;
  while (std::getline(in, line)) {
    const auto pos = line.find("\"epoch\": ");
    if (pos == std::string::npos) continue;
    const long long e = std::strtoll(line.c_str() + pos + 9, nullptr, 10);
    if (e >= 1 && e <= s.start_epoch) kept += line + "\n";
  }
  write_text_atomic(metrics, kept);
  return s.start_epoch;
}

std::string Trainer::dry_run(bool write) {
  auto& s = *s_;
  const bool writes = write && s.main();
  if (writes) write_text_atomic(s.path("config.yaml"), s.cfg.resolved_yaml);
  std::string estimates;
  if (s.device.is_cuda() && !s.recurrent()) {  // (a rollout trains under policy none only)
    const auto b = std::min<int64_t>(s.cfg.data.batch_size, s.train_x.size(0));
    const auto x = s.model_input(s.train_x.narrow(0, 0, b).to(s.device));
    estimates =
        "offload estimates for one training batch " + c10::str(x.sizes()) + ":\n" +
        estimate_policies(s.model, x, offload_settings(s.cfg.offload, PlanCacheText::kConfigKey));
    if (writes) write_text_atomic(s.path("offload_estimates.txt"), estimates);
  }
  JsonObject o;
  o.integer("n_params", n_params())
      .str("device", s.device.str())
      .str("train_shape", c10::str(s.train_x.sizes()))
      .raw("dry_run", "true");
  if (writes) write_text_atomic(s.path("summary.json"), o.text() + "\n");
  return estimates;
}

namespace {

// "7s", "1m07s", "2h03m".
std::string duration_text(double seconds) {
  const auto t = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (t < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", t);
  } else if (t < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", t / 3600, t / 60 % 60);
  }
  return buf;
}

// Progress on stderr, rank 0's. Within an epoch: on a terminal (output.progress
// auto or bar) a bar redrawn as batches finish, with samples/s and the epoch's
// time left; off a terminal (auto, plain) a line every output.progress_every
// seconds once an epoch has run half of that (short epochs print none). After
// each epoch one line (bar, plain). The times are the host's: with a GPU's
// queue ahead of it, the first readings run early.
struct ProgressDisplay {
  bool bar = false;
  bool plain = false;
  double plain_every = 10;                  // seconds between plain lines
  static constexpr double kBarEvery = 0.1;  // the bar's redraws at most this often

  ProgressDisplay(Progress progress, double every, bool main) : plain_every(every) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    bar = main && (progress == Progress::kBar || (progress == Progress::kAuto && tty));
    plain = main && (progress == Progress::kPlain || (progress == Progress::kAuto && !tty));
  }
  // Ends the bar's line before a message of its own.
  void break_line() const {
    if (bar) std::fprintf(stderr, "\n");
  }
  // An epoch starts (or goes on after a resume) with `done` of its samples done.
  void start_epoch(int64_t done) {
    t0_ = Clock::now();
    last_ = t0_;
    done0_ = done;
    plain_lines_ = 0;
  }
  // `done` of `total` batches finished, `samples` of `total_samples` (all ranks).
  void batch(int64_t epoch, int64_t epochs, size_t done, size_t total, int64_t samples,
             int64_t total_samples) {
    if (!bar && !plain) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    const double since = std::chrono::duration<double>(now - last_).count();
    const double rate = elapsed > 0 ? static_cast<double>(samples - done0_) / elapsed : 0.0;
    const double left = rate > 0 ? static_cast<double>(total_samples - samples) / rate : 0.0;
    char speed[96] = "";
    if (elapsed >= 0.5 && rate > 0) {
      std::snprintf(speed, sizeof(speed), "  %.0f samples/s  %s left", rate,
                    duration_text(left).c_str());
    }
    if (bar) {
      if (since < kBarEvery && done != total) return;
      last_ = now;
      const int width = 30;
      const int filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s%s] %zu/%zu%s",
                   static_cast<long long>(epoch), static_cast<long long>(epochs),
                   std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(), done,
                   total, speed);
      std::fflush(stderr);
      return;
    }
    if (elapsed < plain_every / 2 || done == total) return;
    if (plain_lines_ > 0 && since < plain_every) return;
    last_ = now;
    ++plain_lines_;
    std::fprintf(stderr, "epoch %lld/%lld: batch %zu/%zu (%.0f%%), %.0f samples/s, %s left\n",
                 static_cast<long long>(epoch), static_cast<long long>(epochs), done, total,
                 100.0 * static_cast<double>(done) / static_cast<double>(total), rate,
                 duration_text(left).c_str());
    std::fflush(stderr);
  }
  bool shows() const { return bar || plain; }
  void epoch_line(const std::string& line) const {
    if (bar) std::fprintf(stderr, "\r\033[K");
    if (bar || plain) std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  Clock::time_point t0_, last_;
  int64_t done0_ = 0;
  int plain_lines_ = 0;
};

using EvalLoss = StepLoss;

// training.eval_losses by name ("h1", "l2"; each once), summed over the batch.
std::map<std::string, EvalLoss> eval_losses(const RunConfig& c) {
  const int64_t d = static_cast<int64_t>(c.model.n_modes().size());
  std::map<std::string, EvalLoss> losses;
  for (const auto loss : c.training.eval_losses) losses[to_string(loss)] = relative_loss(loss, d);
  return losses;
}

// One epoch's training loss and what the epoch line reports besides.
struct EpochStats {
  double lr = 0;          // the learning rate of the epoch's steps
  double train_loss = 0;  // mean over the samples of the steps taken, all ranks
  int64_t step_peak = 0;  // the largest offloaded step's peak GPU memory
  int64_t skipped = 0;    // fp16: steps skipped for non-finite gradients
  // training.max_grad_norm: the finite gradient norms (before clipping) of this
  // process's steps in the epoch, their mean and largest
  double grad_norm_mean = 0, grad_norm_max = 0;
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
  torch::Tensor predict(const torch::Tensor& x);
  // predictions.h5, model.pt and summary.json (rank 0).
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
  // Navier-Stokes: per_step_rel_l2's and cumulative_rel_l2's sums over the batch.
  // out, y: [B, C, *S] decoded -> [2, t_out] float64
  torch::Tensor record_errors(const torch::Tensor& out, const torch::Tensor& y) const {
    const auto p = s_.trajectory(out), t = s_.trajectory(y);
    return torch::stack({per_step_rel_l2(p, t), cumulative_rel_l2(p, t)}).to(torch::kDouble);
  }
  StepResult train_step(const torch::Tensor& x, const torch::Tensor& y);
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

void TrainingRun::open_logs() {
  if (s_.main()) metrics_log_.open(s_.path("metrics.jsonl"), std::ios::app);
  if (s_.main() && !metrics_log_) {
    throw std::runtime_error(s_.path("metrics.jsonl") + ": cannot open for writing");
  }
  // Offload telemetry, and the memory timeline of one step (the third: the
  // first ones pay for cuDNN/cuFFT plans and the pinned pool).
  if (s_.step->offloading() && s_.main()) {
    telemetry_.open(s_.path("telemetry.jsonl"), std::ios::app);
    if (!telemetry_)
      throw std::runtime_error(s_.path("telemetry.jsonl") + ": cannot open for writing");
  }
  const int64_t n = s_.train_x.size(0);
  const int64_t steps_per_epoch = (n + c_.data.batch_size - 1) / c_.data.batch_size;
  // (A rollout's step records no timeline: fno_train/offload_step.h.)
  if (c_.offload.timeline && s_.device.is_cuda() && s_.main() && !s_.recurrent()) {
    timeline_step_ = std::min<int64_t>(2, steps_per_epoch * c_.training.epochs - 1);
  }
}

// The model's prediction for a batch of kept inputs, decoded: one forward, or
// for the recurrent Navier-Stokes model its rollout (within the step's plan,
// without gradients).
// x: [B, Cin, *S] -> [B, Cout, *S] (recurrent: [B, t_in, R, R] -> [B, t_out, R, R])
torch::Tensor TrainingRun::predict(const torch::Tensor& x) {
  torch::Tensor out;
  if (s_.recurrent()) {
    out = rollout([this](const torch::Tensor& in) { return s_.step->forward(in); }, x, s_.ns_t_out);
  } else {
    out = s_.step->forward(s_.model_input(x));
  }
  return s_.out_norm.fitted() ? s_.out_norm.inverse_transform(out) : out;
}

void TrainingRun::capture_evaluation() {
  const auto on = torch::TensorOptions().device(s_.device);
  eval_sums_ = torch::zeros({static_cast<int64_t>(losses_.size())}, on.dtype(torch::kFloat));
  if (s_.ns()) eval_steps_ = torch::zeros({2, s_.ns_t_out}, on.dtype(torch::kDouble));
  eval_graphs_ = std::make_unique<GraphedFunction>(
      [this](const std::vector<torch::Tensor>& in) { return eval_body(in); }, s_.device,
      TrainStep::kGraphWarmup, s_.train_step->graph_pool());
  if (c_.training.cuda_graphs == CudaGraphs::kAuto) {
    eval_graphs_->set_capture_limit_ms(s_.auto_capture_limit_ms());
  }
}

// One evaluation batch: the decoded prediction and each metric's sum over the
// batch, added into eval_sums_ in losses_' order (Navier-Stokes: the per-record
// errors into eval_steps_). evaluate()'s eager loop computes the same.
// x: [b, Cin, *S] as kept (normalized when encode_input), y: [b, Cout, *S] raw truth
std::vector<torch::Tensor> TrainingRun::eval_body(const std::vector<torch::Tensor>& in) {
  torch::NoGradGuard no_grad;
  const auto out = predict(in.at(0));
  const auto& y = in.at(1);
  std::vector<torch::Tensor> values;
  for (const auto& [name, fn] : losses_) {
    values.push_back(s_.recurrent() ? trajectory_rel_l2(out, y) : fn(out, y));
  }
  eval_sums_.add_(torch::stack(values));
  if (eval_steps_.defined()) {
    eval_steps_.add_(record_errors(out, y));
  }
  return {};
}

// Each metric of each test set: the mean per-sample relative error, over all
// ranks. Navier-Stokes adds each set's relative L2 error per predicted record
// ("<set>_l2_per_step"), their mean over the records ("<set>_l2_step") and the
// error of the trajectory up to each record ("<set>_l2_upto": a shorter
// rollout's whole-trajectory error); its "<set>_l2" is the error of the whole
// predicted trajectory (the paper's), upto's last entry.
std::map<std::string, double> TrainingRun::evaluate() {
  // Each metric's sum over its set (this rank's share) and the set's size.
  std::vector<std::string> keys;
  std::vector<double> sums_all, sizes;
  torch::NoGradGuard no_grad;
  s_.model->eval();
  for (const auto& e : s_.tests) {
    std::map<std::string, torch::Tensor> sums;
    torch::Tensor step_sums;  // Navier-Stokes: [2, t_out]
    // Several ranks: each evaluates a contiguous share of the set, and the
    // sums are added over ranks (no sample twice, none left out).
    const int64_t m = e.x.size(0);
    const int64_t share = (m + s_.world_size - 1) / s_.world_size;
    const int64_t lo = std::min(m, s_.rank * share), hi = std::min(m, lo + share);
    if (eval_graphs_) {
      eval_sums_.zero_();
      if (eval_steps_.defined()) eval_steps_.zero_();
    }
    // In order, as contiguous slices: no index tensors, no host-device syncs.
    for (int64_t start = lo; start < hi; start += e.batch_size) {
      const int64_t len = std::min(e.batch_size, hi - start);
      if (eval_graphs_) {
        eval_graphs_->run({e.x.narrow(0, start, len), e.y.narrow(0, start, len)});
        if (const auto note = eval_graphs_->take_note(); !note.empty() && s_.main()) {
          std::fprintf(stderr, "fno_train: evaluation: %s\n", note.c_str());
        }
        continue;
      }
      const auto out = predict(e.x.narrow(0, start, len).to(s_.device, /*non_blocking=*/true));
      const auto y = e.y.narrow(0, start, len).to(s_.device, true);
      for (const auto& [name, fn] : losses_) {
        // summed over the batch; a rollout's L2 over its whole trajectory
        auto v = s_.recurrent() ? trajectory_rel_l2(out, y) : fn(out, y);
        sums[name] = sums.count(name) ? sums[name] + v : v;
      }
      if (s_.ns()) {
        const auto v = record_errors(out, y);
        step_sums = step_sums.defined() ? step_sums + v : v;
      }
    }
    // The set's sums in one read: each metric in losses_' order, then the
    // per-record sums (a rank without samples adds zeros).
    std::vector<torch::Tensor> parts;
    if (eval_graphs_) {
      parts.push_back(eval_sums_.to(torch::kDouble));
      if (eval_steps_.defined()) parts.push_back(eval_steps_.flatten());
    } else if (!sums.empty()) {
      for (const auto& [name, fn] : losses_)
        parts.push_back(sums[name].to(torch::kDouble).view({1}));
      if (step_sums.defined()) parts.push_back(step_sums.flatten());
    }
    const auto read = parts.empty() ? torch::Tensor() : torch::cat(parts).cpu();
    const auto value = [&](int64_t i) { return read.defined() ? read[i].item<double>() : 0.0; };
    int64_t i = 0;
    for (const auto& [name, fn] : losses_) {
      keys.push_back(e.name + "_" + name);
      sums_all.push_back(value(i++));
      sizes.push_back(static_cast<double>(m));
    }
    for (int64_t r = 0; r < (s_.ns() ? 2 : 0); ++r) {
      for (int64_t t = 0; t < s_.ns_t_out; ++t) {
        keys.push_back(e.name + (r == 0 ? kPerStep : kUpTo) + std::to_string(t));
        sums_all.push_back(value(i++));
        sizes.push_back(static_cast<double>(m));
      }
    }
  }
  s_.model->train();
  if (s_.group) sums_all = s_.group->all_reduce_sum(sums_all);  // one collective for all
  std::map<std::string, double> metrics;
  per_record.clear();
  for (size_t k = 0; k < keys.size(); ++k) {
    const bool step = keys[k].find(kPerStep) != std::string::npos;
    const auto at = keys[k].find(step ? kPerStep : kUpTo);
    if (at == std::string::npos) {
      metrics[keys[k]] = sums_all[k] / sizes[k];
      continue;
    }
    const auto name = keys[k].substr(0, at) + (step ? "_l2_per_step" : "_l2_upto");
    per_record[name].push_back(sums_all[k] / sizes[k]);
  }
  for (const auto& e : s_.tests) {  // "<set>_l2_step": the mean over the records
    const auto errors = per_record.find(e.name + "_l2_per_step");
    if (errors == per_record.end()) continue;
    double sum = 0;
    for (const double v : errors->second) sum += v;
    metrics[e.name + "_l2_step"] = sum / static_cast<double>(errors->second.size());
  }
  return metrics;
}

// Checkpoints: rank 0 writes them (the state is the same on every rank), on
// the writer thread. This thread takes the snapshot (host copies: training goes
// on mutating the live tensors) and hands it over; it waits only when the
// writer is still busy with one request and another is queued that writes a
// file this one does not (BackgroundWriter::submit: a queued request whose
// files this one writes too is replaced by it). A write error surfaces at the
// next request or wait. The latest checkpoint rotates there: the one it
// replaces stays as checkpoint_previous.pt.
void TrainingRun::save_checkpoints(const std::vector<std::string>& names, int64_t epoch,
                                   int64_t batch, double loss_sum, int64_t samples) {
  if (!s_.main() || names.empty()) return;
  auto snap = std::make_shared<TensorSnapshot>(
      snapshot_tensors(checkpoint_dict(s_, epoch, batch, loss_sum, samples)));
  writer_.submit(
      [snap, names, dir = s_.run_dir] {
        snap->wait();
        // One digest and serialization for all the names: the same bytes in each.
        const auto bytes = checkpoint_file_bytes(snap->tensors);
        for (const auto& name : names) {
          const std::string path = dir + "/" + name;
          if (name == "checkpoint_latest.pt" && file_exists(path) &&
              ::rename(path.c_str(), (dir + "/checkpoint_previous.pt").c_str()) != 0) {
            throw std::runtime_error(
                path + ": cannot rotate to checkpoint_previous.pt: " + std::strerror(errno));
          }
          write_file_atomic(path, bytes.data(), bytes.size());
        }
      },
      names);
}

// The shared training step (TrainStep), with a step that does not fit the
// GPU (or auto's budget) turned into a TrainingError with advice. The
// result's loss is the batch's; fp16 may have skipped the step.
StepResult TrainingRun::train_step(const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor loss;
  try {
    // Under CUDA graphs the whole step is one graph (its out-of-memory error
    // comes from a warm-up step or the capture).
    if (s_.train_step->cuda_graphs()) return s_.train_step->run(x, y);
    loss = s_.train_step->forward_backward(x, y);
  } catch (const offload::BudgetError& e) {
    progress_.break_line();
    throw TrainingError(e.what());
  } catch (const c10::OutOfMemoryError&) {
    progress_.break_line();
    writer_.wait();  // (the last checkpoint on disk, or its write error)
    const std::string advice = s_.step->out_of_memory_advice(x);
    const std::string latest = s_.path("checkpoint_latest.pt");
    throw TrainingError(
        "CUDA out of memory in a training step on a batch " + c10::str(x.sizes()) + ": " + advice +
        (file_exists(latest) ? "; the last checkpoint is " + latest : std::string("")));
  }
  // Outside the handlers above: an error of the update is not the step's out of memory.
  return s_.train_step->update(loss);
}

// Telemetry of an offloaded step (telemetry.jsonl), and the memory timeline of the recorded one.
void TrainingRun::after_step(int64_t epoch, Clock::time_point step_t0, bool record) {
  if (telemetry_.is_open()) {
    JsonObject t;
    t.integer("epoch", epoch)
        .integer("step", global_step_)
        .num("host_ms", std::chrono::duration<double, std::milli>(Clock::now() - step_t0).count())
        .raw("offload", s_.step->last_stats().to_json());
    telemetry_ << t.text() << "\n";
    if (!telemetry_) throw std::runtime_error(s_.path("telemetry.jsonl") + ": write failed");
  }
  if (record) {
    write_text_atomic(
        s_.path("memory_timeline.csv"),
        offload::timeline_csv(s_.step->last_stats().timeline,
                              "GPU memory of one training step; policy " + c_.offload.policy.text +
                                  ", device " + s_.device.str() + ", batch " +
                                  std::to_string(c_.data.batch_size)));
  }
  ++global_step_;
}

// Stop after this step: save where we are, mid-epoch, and let the caller exit.
void TrainingRun::stop(int sig, int64_t epoch, size_t batch, std::pair<double, int64_t> totals) {
  progress_.break_line();
  save_checkpoints({"checkpoint_latest.pt"}, epoch - 1, static_cast<int64_t>(batch), totals.first,
                   totals.second);
  writer_.wait();  // on disk before the process exits
  throw Interrupted(
      sig, "stopped by " + std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + " in epoch " +
               std::to_string(epoch) + " after batch " + std::to_string(batch) +
               (s_.main() ? "; checkpoint written" : "; rank 0 wrote the checkpoint") +
               "; continue with --resume " + s_.run_dir);
}

EpochStats TrainingRun::train_epoch(int64_t epoch) {
  EpochStats stats;
  if (s_.device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(s_.device.index());
  s_.model->train();
  stats.lr = s_.optimizer->param_groups()[0].options().get_lr();
  const int64_t n = s_.train_x.size(0);
  auto batches =
      data::epoch_batches(n, c_.data.batch_size, c_.data.shuffle,
                          static_cast<uint64_t>(c_.training.seed), epoch, s_.rank, s_.world_size);
  // The epoch's sample order goes to the data's device once; each batch is a
  // slice of it. (A small index copied per batch from pageable memory would
  // synchronize the stream every step and expose every kernel launch.)
  const auto order = torch::cat(batches).to(s_.train_x.device());
  std::vector<int64_t> offsets{0};
  for (const auto& b : batches) offsets.push_back(offsets.back() + b.numel());
  torch::Tensor loss_sum =
      torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(s_.device));
  int64_t samples = 0;  // of the steps taken (fp16 skips steps with non-finite gradients)
  // fp16 under CUDA graphs decides on the device whether a step is taken:
  // the samples and the steps taken are counted there, [2] float64.
  torch::Tensor taken_counts;
  int64_t device_steps = 0;  // steps whose taking taken_counts counts
  if (s_.scaler && s_.train_step->cuda_graphs()) {
    taken_counts = torch::zeros({2}, loss_sum.options());
  }
  // training.max_grad_norm: each step's gradient norm, by batch, on the device
  // (one copy a step; their statistics read once, after the epoch; NaN: no step)
  torch::Tensor norms;
  if (c_.training.max_grad_norm > 0) {
    norms =
        torch::full({static_cast<int64_t>(batches.size())}, std::numeric_limits<float>::quiet_NaN(),
                    loss_sum.options().dtype(torch::kFloat));
  }
  size_t first_batch = 0;
  if (epoch == s_.start_epoch + 1 && s_.start_batch > 0) {  // resuming an interrupted epoch
    first_batch = static_cast<size_t>(s_.start_batch);
    if (s_.main()) {  // the sums so far are over all ranks: count them once
      loss_sum += s_.start_loss_sum;
      samples += s_.start_samples;
    }
  }
  // The epoch's loss and samples so far, over all ranks.
  const auto totals = [&]() -> std::pair<double, int64_t> {
    double l = 0;
    double k = static_cast<double>(samples);
    if (taken_counts.defined()) {  // one read for the three numbers
      const auto v = torch::cat({loss_sum.reshape({1}), taken_counts}).cpu();
      const auto* n = v.data_ptr<double>();
      l = n[0];
      k += n[1];
      stats.skipped += device_steps - std::llround(n[2]);
    } else {
      l = loss_sum.item<double>();
    }
    if (s_.group) {
      const auto t = s_.group->all_reduce_sum(std::vector<double>{l, k});
      l = t[0];
      k = t[1];
    }
    return {l, static_cast<int64_t>(std::llround(k))};
  };
  // The samples of this epoch over all ranks (each rank's batches are equal in size).
  const auto all_ranks = [&](int64_t n) { return n * s_.world_size; };
  progress_.start_epoch(all_ranks(offsets[first_batch]));
  for (size_t b = first_batch; b < batches.size(); ++b) {
    const auto i = order.narrow(0, offsets[b], offsets[b + 1] - offsets[b]);
    const auto x = s_.model_input(s_.train_x.index_select(0, i).to(s_.device, true));
    const auto y = s_.train_y.index_select(0, i).to(s_.device, true);
    const bool record = timeline_step_ == global_step_;
    if (record) s_.step->record_next_timeline();
    const auto step_t0 = Clock::now();
    const auto result = train_step(x, y);
    if (!result.stepped) ++stats.skipped;
    // (the graph's outputs hold until its next replay: copied here, on the same stream)
    if (result.grad_norm.defined() && norms.defined()) {
      norms[static_cast<int64_t>(b)].copy_(result.grad_norm);
    }
    if (s_.step->offloading()) {
      stats.step_peak = std::max(stats.step_peak, s_.step->last_stats().peak_allocated);
    }
    after_step(epoch, step_t0, record);
    if (result.taken.defined()) {
      // (the graph's outputs hold until its next replay: used here, on the same stream)
      const auto taken = result.taken.reshape({}).to(torch::kDouble);
      loss_sum += at::where(taken > 0, result.loss.detach().to(torch::kDouble), 0.0);
      taken_counts += torch::stack({taken * static_cast<double>(x.size(0)), taken});
      ++device_steps;
    } else if (result.stepped) {
      loss_sum += result.loss.detach().to(torch::kDouble);
      samples += x.size(0);
    }
    // Several ranks stop together: a signal to any of them stops all after this step.
    const int sig = s_.group ? static_cast<int>(s_.group->all_reduce_max(g_stop_signal))
                             : static_cast<int>(g_stop_signal);
    if (sig != 0) stop(sig, epoch, b + 1, totals());
    progress_.batch(epoch, c_.training.epochs, b + 1, batches.size(), all_ranks(offsets[b + 1]),
                    all_ranks(offsets.back()));
  }
  // The mean over the samples of the steps taken (fp16 skips steps with
  // non-finite gradients), over all ranks.
  const auto [epoch_loss, epoch_samples] = totals();
  stats.train_loss = epoch_loss / static_cast<double>(epoch_samples);
  if (norms.defined()) {  // the finite norms' mean and largest (0 where none is finite)
    const auto g = norms.to(torch::kDouble);
    const auto finite = at::isfinite(g);
    const auto v = at::where(finite, g, 0.0);
    const auto n = torch::stack({v.sum(), finite.sum().to(torch::kDouble), v.max()}).cpu();
    const auto* p = n.data_ptr<double>();
    stats.grad_norm_mean = p[1] > 0 ? p[0] / p[1] : 0.0;
    stats.grad_norm_max = p[2];
  }
  if (!std::isfinite(stats.train_loss)) {
    progress_.break_line();
    writer_.wait();  // the last good checkpoint on disk (nothing of this epoch is written)
    const std::string kept =
        file_exists(s_.path("checkpoint_latest.pt"))
            ? "; the last good checkpoint is " + s_.path("checkpoint_latest.pt")
            : "; no checkpoint was written";
    throw TrainingError("epoch " + std::to_string(epoch) + ": the training loss is " +
                        (std::isnan(stats.train_loss) ? "NaN" : "infinite") + "; stopped" + kept);
  }
  return stats;
}

void TrainingRun::end_epoch(int64_t epoch, const EpochStats& stats, Clock::time_point t0) {
  if (s_.scheduler) s_.scheduler->step(stats.train_loss);
  std::map<std::string, double> metrics;
  if (epoch % c_.training.eval_every == 0 || epoch == c_.training.epochs) metrics = evaluate();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t peak = 0;
  if (s_.device.is_cuda()) {
    // The offloader resets the allocator's peak at every step it runs: keep
    // the largest step peak too.
    // Under CUDA graphs the replays allocate nothing: the captures' peak counts.
    peak = std::max(
        {stats.step_peak, s_.train_step->graph_peak_bytes(),
         static_cast<int64_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(s_.device.index())
                                  .allocated_bytes[0]
                                  .peak)});
  }
  if (s_.group) peak = s_.group->all_reduce_max(peak);  // the largest of any rank's GPU
  log_epoch(epoch, stats, metrics, seconds, peak);
  // One request to the writer: the best and the latest checkpoint of this
  // epoch are one snapshot (the same state), written in this order.
  std::vector<std::string> checkpoints;
  if (!metrics.empty()) {
    last_metrics = metrics;
    if (!s_.best_key.empty() && metrics.count(s_.best_key) && metrics[s_.best_key] < s_.best) {
      s_.best = metrics[s_.best_key];
      checkpoints.push_back("checkpoint_best.pt");
    }
  }
  if (epoch % c_.training.checkpoint_every == 0 || epoch == c_.training.epochs) {
    checkpoints.push_back("checkpoint_latest.pt");
  }
  save_checkpoints(checkpoints, epoch);
  if (!progress_.shows()) return;
  std::ostringstream msg;
  msg << "epoch " << epoch << "/" << c_.training.epochs << "  lr " << stats.lr << "  train_"
      << to_string(c_.training.loss) << " " << stats.train_loss;
  for (const auto& [k, v] : metrics) msg << "  " << k << " " << v;
  if (c_.training.max_grad_norm > 0) msg << "  grad_norm_max " << stats.grad_norm_max;
  if (s_.scaler) {
    msg << "  loss_scale " << s_.scaler->scale_value() << "  skipped " << stats.skipped;
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "  %.2fs", seconds);
  msg << secs;
  progress_.epoch_line(msg.str());
}

// One line of metrics.jsonl (rank 0).
void TrainingRun::log_epoch(int64_t epoch, const EpochStats& stats,
                            const std::map<std::string, double>& metrics, double seconds,
                            int64_t peak) {
  JsonObject line;
  line.integer("epoch", epoch).num("lr", stats.lr).num("train_loss", stats.train_loss);
  for (const auto& [k, v] : metrics) line.num(k, v);
  if (!metrics.empty()) {
    for (const auto& [k, errors] : per_record) {
      std::string list = "[";
      for (size_t t = 0; t < errors.size(); ++t) list += (t ? ", " : "") + json::number(errors[t]);
      line.raw(k, list + "]");
    }
  }
  if (c_.training.max_grad_norm > 0) {
    line.num("grad_norm", stats.grad_norm_mean).num("grad_norm_max", stats.grad_norm_max);
  }
  line.num("seconds", seconds).integer("peak_gpu_bytes", peak);
  if (s_.scaler) {
    line.integer("skipped_steps", stats.skipped).num("loss_scale", s_.scaler->scale_value());
  }
  if (s_.main()) {
    metrics_log_ << line.text() << "\n";
    metrics_log_.flush();
    if (!metrics_log_) throw std::runtime_error(s_.path("metrics.jsonl") + ": write failed");
  }
}

// predictions.h5: the first few samples of each test set.
TrainingRun::Predictions TrainingRun::predictions() {
  if (c_.data.n_predictions <= 0 || s_.tests.empty()) return {};
  torch::NoGradGuard no_grad;
  s_.model->eval();
  std::vector<std::pair<std::string, torch::Tensor>> sets;
  for (const auto& e : s_.tests) {
    const int64_t k = std::min<int64_t>(c_.data.n_predictions, e.x.size(0));
    const auto out = predict(e.x.narrow(0, 0, k).to(s_.device));
    // Navier-Stokes: the t_in input records [k, t_in, R, R], truth and
    // prediction as trajectories [k, t_out, R, R], and the set's errors per record and up
    // to each record [t_out].
    const auto y = e.y.narrow(0, 0, k);
    sets.emplace_back(e.name + "/x", e.x_raw.narrow(0, 0, k));
    sets.emplace_back(e.name + "/y", (s_.ns() ? s_.trajectory(y) : y).contiguous().cpu());
    sets.emplace_back(e.name + "/pred", (s_.ns() ? s_.trajectory(out) : out).contiguous().cpu());
    for (const char* what : {"_l2_per_step", "_l2_upto"}) {
      const auto errors = per_record.find(e.name + what);
      if (errors != per_record.end()) {
        sets.emplace_back(e.name + "/" + (what + 1),
                          torch::tensor(errors->second, torch::kDouble).to(torch::kFloat));
      }
    }
  }
  std::vector<data::Attribute> attrs;
  data::Attribute a;
  a.name = "epochs";
  a.number = static_cast<double>(c_.training.epochs);
  a.is_number = true;
  attrs.push_back(a);
  data::Attribute cfg_attr;
  cfg_attr.name = "config";
  cfg_attr.text = c_.resolved_yaml;
  attrs.push_back(cfg_attr);
  data::Attribute problem;
  problem.name = "problem";
  problem.text = to_string(c_.data.problem);
  attrs.push_back(problem);
  if (s_.ns()) {
    data::Attribute mode;
    mode.name = "ns_mode";
    mode.text = to_string(c_.data.ns_mode);
    attrs.push_back(mode);
  }
  return {std::move(sets), std::move(attrs)};
}

void TrainingRun::write_summary(const std::map<std::string, double>& metrics,
                                Clock::time_point wall0) {
  JsonObject summary;
  const std::string device =
      s_.device.is_cuda()
          ? s_.device.str() + " (" + at::cuda::getDeviceProperties(s_.device.index())->name + ")"
          : std::string("cpu");
  summary.integer("n_params", count_params(*s_.model))
      .str("precision", to_string(s_.precision))
      .raw("metrics", metrics_json(metrics))
      .str("device", device)
      .integer("epochs", c_.training.epochs)
      .integer("world_size", s_.world_size)
      .num("wall_seconds", std::chrono::duration<double>(Clock::now() - wall0).count());
  if (!s_.best_key.empty()) summary.str("best_metric", s_.best_key).num("best", s_.best);
  write_text_atomic(s_.path("summary.json"), summary.text() + "\n");
}

// The predictions' forward runs here while the writer may still write the
// last checkpoint; predictions.h5 and model.pt are then one request to the
// writer, and summary.json is written once they are on disk.
void TrainingRun::write_outputs(const std::map<std::string, double>& metrics,
                                Clock::time_point wall0) {
  auto preds = std::make_shared<Predictions>(predictions());
  writer_.wait();
  // The model alone, as a plain state dict: torch.load + neuraloperator's
  // FNO.load_state_dict read it in Python.
  auto model = std::make_shared<TensorSnapshot>(snapshot_tensors(state_dict(*s_.model)));
  // The normalizers beside it (model.pt stays a plain state dict): with
  // model.pt and config.yaml, all that fno_predict needs.
  auto norms = std::make_shared<TensorDict>(normalizers_dict(s_));
  writer_.submit([preds, model, norms, predictions_h5 = s_.path("predictions.h5"),
                  model_pt = s_.path("model.pt"), norms_pt = s_.path("normalizers.pt")] {
    if (!preds->sets.empty()) data::write_hdf5(predictions_h5, preds->sets, preds->attrs);
    model->wait();
    if (!norms->is_empty()) save_tensor_dict(*norms, norms_pt);
    save_tensor_dict(model->tensors, model_pt);
  });
  writer_.wait();
  write_summary(metrics, wall0);
}

}  // namespace

// torchtitan's shape: train() -> train_epoch() -> train_step() (TrainStep:
// forward, loss, backward, optimizer), with evaluation, checkpoints and the
// outputs beside them.
std::map<std::string, double> Trainer::train() {
  auto& s = *s_;
  const auto wall0 = Clock::now();
  if (s.main()) {
    write_text_atomic(s.path("config.yaml"), s.cfg.resolved_yaml);
    // The data files, pinned for --resume (a run from before inputs.txt is pinned from here on).
    if (!file_exists(s.path(kInputsFile)))
      write_text_atomic(s.path(kInputsFile), inputs_text(s.cfg));
  }
  TrainingRun run(s);
  StopSignals stop_signals;
  run.open_logs();
  for (int64_t epoch = s.start_epoch + 1; epoch <= s.cfg.training.epochs; ++epoch) {
    const auto t0 = Clock::now();
    const auto stats = run.train_epoch(epoch);
    run.end_epoch(epoch, stats, t0);
  }
  if (run.last_metrics.empty() && !s.tests.empty()) run.last_metrics = run.evaluate();
  // Rank 0 alone writes the outputs.
  if (s.main()) run.write_outputs(run.last_metrics, wall0);
  return run.last_metrics;
}

}  // namespace fno
