// A run's files besides its outputs: the checkpoint's contents, the pinned
// data files (inputs.txt), --resume and --dry-run; and the stop signals.
#include "trainer_state.h"

#include <fno/overrides.h>

namespace fno {
namespace detail {
namespace {

// Keys of the checkpoint file.
constexpr const char* kEpochKey = "meta.epoch";
constexpr const char* kBestKey = "meta.best";
constexpr const char* kBatchKey = "meta.batch";       // batches done of the next epoch
constexpr const char* kLossSumKey = "meta.loss_sum";  // and their summed loss (all ranks)
constexpr const char* kSamplesKey = "meta.samples";   // and their samples (all ranks)
constexpr const char* kWorldKey =
    "meta.world_size";  // data-parallel shards of the run that wrote it

// The signal that asked the run to stop (SIGINT, SIGTERM), or 0.
volatile std::sig_atomic_t g_stop_signal = 0;
// (C linkage makes the name global even here, so it is the library's own.)
extern "C" void fno_train_on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = fno_train_on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

int stop_signal() { return static_cast<int>(g_stop_signal); }

TensorDict checkpoint_dict(Trainer::State& s, int64_t epoch, int64_t batch, double loss_sum,
                           int64_t samples) {
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
  d.insert(kWorldKey, torch::tensor(s.shards(), torch::kInt64));
  d.insert(kBestKey, torch::tensor(s.best, torch::kFloat64));
  if (s.scaler) {
    for (const auto& [k, v] : s.scaler->state()) d.insert("scaler." + k, v);
  }
  return d;
}

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

/// The data files a run reads, by config key: (key, path).
std::vector<std::pair<std::string, std::string>> input_files(const RunConfig& cfg) {
  if (cfg.data.format != DataFormat::kAuto) return benchmark_input_files(cfg);
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

}  // namespace detail

using namespace detail;

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
    if (s.start_batch > 0 && old_world != s.shards()) {
      // An interrupted epoch, continued by another number of ranks: the
      // samples done (the first ones of the epoch's order, over all ranks)
      // become whole batches of the new global batch, rounded down; the
      // samples past that boundary are trained again.
      const int64_t global = s.cfg.data.batch_size * s.shards();
      const int64_t done = s.start_samples / global * global;
      if (done != s.start_samples && s.main()) {
        std::fprintf(
            stderr,
            "fno_train: the checkpoint was written by %lld rank(s), this run has %lld: epoch %lld "
            "continues after %lld of its %lld samples done\n",
            static_cast<long long>(old_world), static_cast<long long>(s.shards()),
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
    const auto b = std::min<int64_t>(s.cfg.data.batch_size, s.n_train_samples());
    const auto x = s.stream ? s.training_batch(1, 0, {}).first
                            : s.model_input(s.train_x.narrow(0, 0, b).to(s.device));
    estimates =
        "offload estimates for one training batch " + c10::str(x.sizes()) + ":\n" +
        estimate_policies(s.model, x, offload_settings(s.cfg.offload, PlanCacheText::kConfigKey));
    if (writes) write_text_atomic(s.path("offload_estimates.txt"), estimates);
  }
  JsonObject o;
  o.integer("n_params", n_params())
      .str("device", s.device.str())
      .str("train_shape", c10::str(torch::IntArrayRef(s.train_shape())))
      .raw("dry_run", "true");
  if (const auto set = json::overrides_json(overrides_set()); !set.empty()) o.raw("overrides", set);
  if (writes) write_text_atomic(s.path("summary.json"), o.text() + "\n");
  return estimates;
}

}  // namespace fno
