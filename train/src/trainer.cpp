#include "trainer_state.h"
#include "training_run.h"

#include "benchmark_run.h"

#include <algorithm>
#include <iostream>

namespace fno {

namespace detail {

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

}  // namespace detail

namespace {

using namespace detail;

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

// A Navier-Stokes file's pairs as the trainer keeps them (ns_pairs), of the
// whole grid. `t_out` -1 takes the rest of the file's records.
data::FieldPairs load_ns_pairs(const std::string& file, const DataConfig& d, int64_t n_samples,
                               int64_t t_out) {
  return ns_pairs(data::load_ns_records(file, ns_load_options(d, n_samples, t_out)), d, t_out);
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

// Per-field statistics [F] as the channel normalizer's [1, C, 1...]: the
// time-varying fields' repeated for each of `steps` steps, the constant ones once.
torch::Tensor per_channel(const torch::Tensor& field, int64_t n_time_varying, int64_t steps,
                          int64_t n_dim) {
  const auto tv = field.narrow(0, 0, n_time_varying).repeat({steps});
  auto c = torch::cat({tv, field.narrow(0, n_time_varying, field.size(0) - n_time_varying)});
  std::vector<int64_t> shape{1, c.size(0)};
  shape.resize(static_cast<size_t>(2 + n_dim), 1);
  return c.reshape(shape);
}

}  // namespace

data::NsLoadOptions detail::ns_load_options(const DataConfig& d, int64_t n_samples, int64_t t_out) {
  return data::NsLoadOptions()
      .key(d.x_key.empty() ? "u" : d.x_key)
      .n_samples(n_samples)
      .subsample(d.subsample)
      .t_in(d.t_in)
      .t_out(t_out);
}

// x the t_in input records [N, t_in, R, R] in both modes (space-time inputs
// are made per batch, State::model_input), y the next t_out records as the
// model predicts them: [N, 1, R, R, t_out] (space_time) or [N, t_out, R, R]
// (recurrent).
data::FieldPairs detail::ns_pairs(const torch::Tensor& u, const DataConfig& d, int64_t t_out) {
  auto pairs = data::ns_recurrent_pairs(u, d.t_in, t_out > 0 ? t_out : u.size(3) - d.t_in);
  // [N, t_out, R, R] -> [N, 1, R, R, t_out], as ns_space_time_pairs' y
  if (d.ns_mode == NsMode::kSpaceTime) pairs.y = pairs.y.permute({0, 2, 3, 1}).unsqueeze(1);
  pairs.y = pairs.y.contiguous();
  return pairs;
}

std::vector<std::pair<std::string, std::string>> detail::benchmark_input_files(
    const RunConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> files;
  const auto& d = cfg.data;
  auto add = [&](const std::string& key, const std::string& path, const std::string& split) {
    const auto found = data::benchmark_files(path, benchmark_options(d, split, -1));
    for (size_t i = 0; i < found.size(); ++i) {
      files.emplace_back(found.size() == 1 ? key : key + "[" + std::to_string(i) + "]", found[i]);
    }
  };
  add("data.train_file", d.train_file, d.split);
  for (size_t i = 0; i < d.tests.size(); ++i) {
    const auto& t = d.tests[i];
    add("data.test[" + std::to_string(i) + "].file", t.file, t.split.empty() ? "test" : t.split);
  }
  return files;
}

using namespace detail;

// A benchmark's split: the windows of its trajectories (n_train of them);
// the per-field statistics of the training split for the normalizers.
data::FieldPairs Trainer::State::load_benchmark(const std::string& file, const std::string& split,
                                                int64_t n_trajectories, bool train,
                                                std::shared_ptr<const data::BenchmarkSet>* keep,
                                                Band* band) {
  auto set = std::make_shared<data::BenchmarkSet>(
      file, benchmark_options(cfg.data, split, n_trajectories));
  if (train) {
    // data.normalization benchmark: the statistics the benchmark ships.
    const bool shipped = cfg.data.normalization == data::NormalizerMode::kBenchmark;
    field_stats_in = shipped ? set->shipped_input_stats() : set->input_field_stats();
    field_stats_out = shipped ? set->shipped_target_stats() : set->target_field_stats();
    n_time_varying_in = set->n_time_varying_inputs();
    if (cfg.domain_padding_auto > 0) {
      const auto line = apply_boundary_padding(cfg, *set);
      if (main()) std::fprintf(stderr, "fno_train: %s\n", line.c_str());
      check_domain_padding(file);
    }
  }
  if (band != nullptr) {  // this rank's rows alone, read by hyperslab (domain_training.cpp)
    const auto [r0, rows] = place_band(file, set->grid(), *band);
    set->select_rows(r0, rows);
  }
  if (keep != nullptr) *keep = set;
  // data.stream: the windows are read batch by batch; one window gives the shapes checked.
  if (train && start_stream(set)) return data::read_windows(*set, {0});
  return set->all_windows();
}

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
  }
  check_domain_config();
  if (main()) make_dirs(run_dir);
  device = pick_device(cfg.device.name, world_size > 1 ? launch->local_rank : -1);
  if (world_size > 1) {
    dist::GroupOptions go;
    go.backend = cfg.distributed.backend;
    go.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(cfg.distributed.timeout_s * 1000.0));
    group = dist::Group::create(*launch, device, go);
  }
  join_domain();
}

// Data: validated at load; inputs normalized if configured, outputs normalized for training.
void Trainer::State::load_data() {
  const auto& c = cfg;
  data::FieldPairs train;
  if (ns()) {
    // (Under domain parallel this rank's rows alone, domain_training.cpp.)
    train = domain ? load_ns_rows(c.data.train_file, c.data.n_train, c.data.t_out, domain->band)
                   : load_ns_pairs(c.data.train_file, c.data, c.data.n_train, c.data.t_out);
    ns_t_out = recurrent() ? train.y.size(1) : train.y.size(4);
    check_ns_model();
  } else if (benchmark()) {
    train = load_benchmark(c.data.train_file, c.data.split, c.data.n_train, true, nullptr,
                           domain ? &domain->band : nullptr);
  } else if (domain) {  // this rank's rows alone (domain_training.cpp)
    train = load_rows(c.data.train_file, load_options(c.data, c.data.n_train), domain->band);
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
  if (stream) {
    fit_streamed_normalizers();
  } else if (domain) {
    fit_domain_normalizers(train);
  } else {
    if (c.data.encode_input) in_norm.fit(train.x);
    if (c.data.encode_output) out_norm.fit(train.y);
  }
  if (benchmark() && c.data.normalization != data::NormalizerMode::kPointwise) {
    // One mean and std per field, over every step of the training split's
    // trajectories (not per window channel).
    const auto& [mi, si] = field_stats_in;
    const auto& [mo, so] = field_stats_out;
    const int64_t nt = n_time_varying_in, outs = mo.size(0);
    if (c.data.encode_input) {
      in_norm.set_state(per_channel(mi, nt, c.data.history, n_dim),
                        per_channel(si, nt, c.data.history, n_dim));
    }
    if (c.data.encode_output) {
      out_norm.set_state(per_channel(mo, outs, c.data.horizon, n_dim),
                         per_channel(so, outs, c.data.horizon, n_dim));
    }
    if (domain) {  // per channel: a band's rows take the whole grid's
      domain->in_rows = in_norm;
      domain->out_rows = out_norm;
    }
  }
  if (!stream) {
    train_x = c.data.encode_input ? in_rows().transform(train.x) : train.x;
    train_y = c.data.encode_output ? out_rows().transform(train.y) : train.y;
  }
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
    std::shared_ptr<const data::BenchmarkSet> set;
    Band band;
    // Samples [first, first + n_samples): with a first, the whole file, then cut.
    const int64_t n = t.first > 0 ? -1 : t.n_samples;
    if (ns()) {
      pairs =
          domain ? load_ns_rows(t.file, n, ns_t_out, band) : load_ns_pairs(t.file, d, n, ns_t_out);
    } else if (benchmark()) {
      if (t.first > 0) {
        throw ConfigError(t.file + ": data.test first " + std::to_string(t.first) +
                          ": a benchmark set is chosen by its split, not by sample");
      }
      pairs = load_benchmark(t.file, t.split.empty() ? "test" : t.split, t.n_samples, false, &set,
                             domain ? &band : nullptr);
    } else if (domain) {
      pairs = load_rows(t.file, load_options(d, n), band);
    } else {
      pairs = data::load_darcy(t.file, load_options(d, n));
    }
    if (t.first > 0) {
      if (pairs.x.size(0) <= t.first) {
        throw std::runtime_error(t.file + ": data.test first " + std::to_string(t.first) +
                                 " is past the file's " + std::to_string(pairs.x.size(0)) +
                                 " samples");
      }
      const int64_t left = pairs.x.size(0) - t.first;
      const int64_t take = t.n_samples > 0 ? std::min(t.n_samples, left) : left;
      if (take < t.n_samples) {
        std::cerr << "fno_train: " << t.file << ": data.test asks for samples [" << t.first << ", "
                  << t.first + t.n_samples << "), the file holds " << pairs.x.size(0) << "; using "
                  << take << "\n";
      }
      pairs.x = pairs.x.narrow(0, t.first, take);
      pairs.y = pairs.y.narrow(0, t.first, take);
    }
    if (pairs.x.dim() != train.x.dim() || pairs.x.size(1) != train.x.size(1) ||
        pairs.y.size(1) != train.y.size(1)) {
      throw std::runtime_error(t.file + ": test data of shape " + c10::str(pairs.x.sizes()) +
                               " does not match the training data " + c10::str(train.x.sizes()));
    }
    EvalSet e;
    // (Named by the grid's rows: under domain parallel x holds this rank's alone.)
    e.name = t.name.empty() ? std::to_string(domain ? band.grid_rows : pairs.x.size(2)) : t.name;
    for (const auto& other : tests) {
      if (other.name == e.name) {
        throw std::runtime_error(t.file + ": a second test set named '" + e.name +
                                 "'; give data.test entries distinct names");
      }
    }
    e.batch_size = t.batch_size;
    e.benchmark = set;
    e.x_raw = pairs.x;
    e.band = band;
    e.x = d.encode_input ? in_rows().transform(pairs.x) : pairs.x;
    e.y = pairs.y;
    tests.push_back(std::move(e));
  }
}

// Keep the data on the GPU when it fits comfortably (resident_data_room: the
// run's data count in a budget); else in pinned host memory, each batch
// copied over as it is used.
void Trainer::State::place_data() {
  if (!device.is_cuda()) return;
  int64_t bytes = stream ? 0 : train_x.nbytes() + train_y.nbytes();
  for (const auto& e : tests) bytes += e.x.nbytes() + e.y.nbytes();
  const auto* props = at::cuda::getDeviceProperties(device.index());
  const int64_t room =
      resident_data_room(cfg.offload.gpu_memory_limit, static_cast<int64_t>(props->totalGlobalMem));
  const bool fits = bytes < room;
  auto place = [&](torch::Tensor& t) {
    if (t.defined()) t = fits ? t.to(device) : t.pin_memory();
  };
  place(train_x);
  place(train_y);
  for (auto& e : tests) {
    place(e.x);
    place(e.y);
  }
  in_norm.to(device);
  out_norm.to(device);
  if (domain) {
    domain->in_rows.to(device);
    domain->out_rows.to(device);
  }
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
    std::optional<K> runs;
    if (kind == K::kAll || kind == K::kBlocks || kind == K::kAuto) runs = K::kNone;
    if (kind == K::kRecomputeOffload) runs = K::kRecompute;
    if (runs) {
      const auto policy = offload::Policy::of(*runs);
      if (main()) {
        std::fprintf(stderr,
                     "fno_train: offload.policy %s: no CUDA device, so nothing is offloaded; "
                     "training with offload.policy %s (config.yaml records it)\n",
                     offload.policy.text.c_str(), policy.text.c_str());
      }
      offload.policy = policy;
      cfg.offload.policy = offload.policy;
      record_setting(cfg, "offload.policy", policy.text);
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
  if (domain) {
    build_domain_step();  // (domain_training.cpp)
  } else {
    train_step = std::make_unique<TrainStep>(
        *step, *optimizer,
        training_loss(cfg.training, static_cast<int64_t>(cfg.model.n_modes().size()), &out_norm),
        scaler.get(), grad_sync.get());
  }
  // The recurrent Navier-Stokes model trains on its rollout (the loss of every step).
  if (recurrent()) train_step->set_rollout(ns_t_out);
  if (cfg.training.max_grad_norm > 0) train_step->set_max_grad_norm(cfg.training.max_grad_norm);
  if (!domain) use_cuda_graphs();  // (a step split across ranks runs eagerly)
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
  gc.offload_policy = cfg.offload.policy;
  gc.micro_batches = cfg.offload.micro_batches;
  gc.world_size = world_size;
  if (group) gc.backend = group->backend_name();
  const auto decision = fno::use_cuda_graphs(*train_step, gc, auto_capture_limit_ms());
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
      << ", batch " << s.cfg.data.batch_size << (s.domain ? " per sample group" : " per rank");
    if (s.domain) {
      const auto& b = s.domain->band;
      o << "; domain parallel " << s.domain->mesh.n << ": rows [" << b.row0 << ", "
        << b.row0 + s.train_x.size(2) << ") of " << b.grid_rows;
    }
    o << ") | ";
  }
  o << "device " << s.device << " | precision " << to_string(s.precision) << " | ";
  if (s.cfg.offload.policy.kind != offload::Policy::Kind::kNone) o << s.step->describe() << " | ";
  if (s.train_step->cuda_graphs()) o << "CUDA graphs | ";
  s.model->pretty_print(o);
  o << ", " << n_params() << " parameters | train " << torch::IntArrayRef(s.train_shape());
  if (s.stream) o << " streamed";
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
  // The benchmark's metric, shared by the ranks (benchmark_eval.cpp); rank 0
  // alone writes the outputs (under domain parallel every rank of the first
  // shard takes part in them, its rows of the predictions).
  if (s.benchmark()) run.last_metrics.merge(run.benchmark_metrics());
  if (s.main() || (s.domain && s.shard() == 0)) run.write_outputs(run.last_metrics, wall0);
  return run.last_metrics;
}

}  // namespace fno
