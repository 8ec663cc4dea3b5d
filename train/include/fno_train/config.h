// The run configuration: one schema, documented in one place (config_schema(),
// rendered as configs/README.md by `fno_train --print-schema`).
//
// A YAML file is checked against the schema: an unknown key, a wrong type or
// an out-of-range value is a ConfigError whose one-line message names the
// file, the line and the key ("configs/darcy.yaml:12: model.hidden_channels:
// expected an integer >= 1, got 'abc'"). Overrides given as "section.key=value"
// (fno_train --set) are checked the same way and named "--set ...".
#pragma once

#include <fno/fno.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno {

/// Replaces line breaks and other control characters with escapes ("\n"), so
/// that a message quoting user input stays on one line.
std::string one_line(const std::string& text);

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& what) : std::runtime_error(one_line(what)) {}
};

/// One evaluation set.
struct TestSetConfig {
  std::string file;        // data file (.pt, .h5, .mat)
  std::string name;        // metric prefix, e.g. "32" -> "32_l2"; default: the grid size
  int64_t n_samples = -1;  // -1: all
  int64_t batch_size = 32;
};

struct RunConfig {
  // model
  FNOOptions model{{16, 16}, 1, 1, 32};
  // data
  std::string train_file;
  int64_t n_train = 1000;
  int64_t batch_size = 32;
  bool shuffle = true;
  int64_t subsample = 1;
  std::string x_key, y_key;
  bool encode_input = false;
  bool encode_output = true;
  std::vector<TestSetConfig> tests;
  int64_t n_predictions = 4;
  // optimizer
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-6;
  // scheduler
  std::string scheduler = "cosine";
  int64_t t_max = 30;
  double eta_min = 0.0;
  int64_t step_size = 100;
  double gamma = 0.5;
  double plateau_factor = 0.5;
  int64_t plateau_patience = 5;
  // training
  int64_t epochs = 20;
  std::string train_loss = "h1";
  std::vector<std::string> eval_losses{"h1", "l2"};
  int64_t checkpoint_every = 1;
  int64_t eval_every = 1;
  int64_t seed = 0;
  std::string precision = "fp32";  // fp32 | tf32 | bf16 | fp16 (fno/precision.h)
  // device
  std::string device = "auto";
  // output
  std::string out_dir = "runs/darcy";
  std::string progress = "auto";
  // offload
  std::string offload_policy = "none";
  int64_t gpu_memory_limit = 0;   // bytes; 0: the device's free memory
  int64_t host_memory_limit = 0;  // bytes; 0: no limit
  int64_t offload_chunks = 1;
  int64_t micro_batches = 1;
  int64_t offload_min_bytes = 1 << 20;
  int64_t prefetch_depth = 1;
  int64_t max_inflight_mib = 0;  // 0: auto (1024, learning: OffloadSettings::learn_inflight)
  int64_t max_prefetch_mib = 3072;
  bool offload_timeline = true;
  std::string offload_compress = "none";  // none | bf16
  std::string plan_cache = "";            // '': the default cache; 'none': no cache
  // distributed (fno_train/distributed.h)
  std::string dist_backend = "auto";  // auto | nccl | gloo
  double dist_timeout_s = 300;
  double dist_bucket_mib = 4;

  /// Directory the config file was read from; relative data paths resolve against it.
  std::string base_dir = ".";
  /// The resolved configuration (every key, defaults filled in) as YAML.
  std::string resolved_yaml;
};

/// Reads and validates a YAML config file, applies `overrides` ("a.b=value"),
/// and resolves relative file paths against the config file's directory.
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same, from YAML text; `origin` names it in errors.
RunConfig parse_config(const std::string& yaml, const std::string& origin,
                       const std::vector<std::string>& overrides = {});

/// The schema as a Markdown reference (every key, type, default and meaning).
std::string config_schema_markdown();

/// offload.max_inflight_mib (and fno_bench --max-inflight-mib): "auto" gives 0,
/// a whole number of MiB in [1, 2^30] gives itself; else std::invalid_argument
/// naming the text.
int64_t parse_inflight_mib(const std::string& text);

}  // namespace fno
