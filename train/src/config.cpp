#include <fno_train/config.h>

#include <fno_offload/planner.h>

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

namespace fno {

std::string one_line(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

enum class Kind { kInt, kFloat, kBool, kString, kIntList, kFloatList, kStringList, kTests };

constexpr double kInf = std::numeric_limits<double>::infinity();

// One key of the schema.
struct Entry {
  const char* key;           // "section.name"
  Kind kind;
  const char* default_yaml;  // the default, as YAML text
  const char* doc;
  double min = -kInf;        // numeric range (inclusive unless *_open)
  double max = kInf;
  bool min_open = false;
  bool max_open = false;
  std::vector<std::string> choices = {};  // allowed strings (for kString / kStringList)
  int min_len = 0;                        // list lengths
  int max_len = 1 << 20;
};

// Keys of one data.test entry.
const std::vector<Entry>& test_entries() {
  static const std::vector<Entry> kEntries = {
      {"file", Kind::kString, "''", "data file of the set (.pt, .h5, .mat), relative to the config file"},
      {"name", Kind::kString, "''", "metric prefix (\"32\" gives 32_l2); default: the grid size"},
      {"n_samples", Kind::kInt, "-1", "first n samples (-1: all)", -1},
      {"batch_size", Kind::kInt, "32", "evaluation batch size", 1},
  };
  return kEntries;
}

const std::vector<Entry>& schema() {
  static const std::vector<Entry> kSchema = {
      // model
      {"model.n_modes", Kind::kIntList, "[16, 16]", "Fourier modes kept per spatial dim; its length (1-3) is the dimension", 1, kInf, false, false, {}, 1, 3},
      {"model.in_channels", Kind::kInt, "1", "channels of the input function", 1},
      {"model.out_channels", Kind::kInt, "1", "channels of the output function", 1},
      {"model.hidden_channels", Kind::kInt, "32", "width of the FNO blocks", 1},
      {"model.n_layers", Kind::kInt, "4", "number of FNO blocks", 1},
      {"model.lifting_channel_ratio", Kind::kFloat, "2", "lifting MLP width / hidden_channels (0: one linear layer)", 0},
      {"model.projection_channel_ratio", Kind::kFloat, "2", "projection MLP width / hidden_channels", 0, kInf, true},
      {"model.positional_embedding", Kind::kBool, "true", "append the grid coordinates to the input"},
      {"model.channel_mlp_expansion", Kind::kFloat, "0.5", "block ChannelMLP width / hidden_channels", 0, kInf, true},
      {"model.domain_padding", Kind::kFloatList, "[]", "zero padding as a fraction of each spatial size ([] none, [p] all dims)", 0, kInf, false, false, {}, 0, 3},
      // data
      {"data.train_file", Kind::kString, "''", "training data file (.pt, .h5, .mat), relative to the config file"},
      {"data.n_train", Kind::kInt, "1000", "first n training samples (-1: all)", -1},
      {"data.batch_size", Kind::kInt, "32", "training batch size", 1},
      {"data.shuffle", Kind::kBool, "true", "reshuffle the training set each epoch (seeded by training.seed)"},
      {"data.subsample", Kind::kInt, "1", "keep every k-th grid point of every set", 1},
      {"data.x_key", Kind::kString, "''", "name of the input array ('' = x in .pt, coeff in HDF5)"},
      {"data.y_key", Kind::kString, "''", "name of the output array ('' = y in .pt, sol in HDF5)"},
      {"data.encode_input", Kind::kBool, "false", "normalize inputs channel-wise (UnitGaussianNormalizer)"},
      {"data.encode_output", Kind::kBool, "true", "normalize outputs channel-wise for training; metrics use decoded outputs"},
      {"data.test", Kind::kTests, "[]", "evaluation sets: a list of {file, name, n_samples, batch_size}"},
      {"data.n_predictions", Kind::kInt, "4", "test samples per set saved to predictions.h5", 0},
      // optimizer
      {"optimizer.name", Kind::kString, "adamw", "optimizer (neuraloperator's AdamW)", -kInf, kInf, false, false, {"adamw"}},
      {"optimizer.lr", Kind::kFloat, "1.0e-3", "learning rate", 0, kInf, true},
      {"optimizer.weight_decay", Kind::kFloat, "0", "decoupled weight decay", 0},
      {"optimizer.betas", Kind::kFloatList, "[0.9, 0.999]", "moment decay rates", 0, 1, false, true, {}, 2, 2},
      {"optimizer.eps", Kind::kFloat, "1.0e-6", "added to sqrt(second moment)", 0},
      // scheduler
      {"scheduler.name", Kind::kString, "cosine", "lr schedule, stepped once per epoch", -kInf, kInf, false, false, {"cosine", "step", "plateau", "none"}},
      {"scheduler.T_max", Kind::kInt, "30", "cosine: epochs of a half period", 1},
      {"scheduler.eta_min", Kind::kFloat, "0", "cosine: lowest lr", 0},
      {"scheduler.step_size", Kind::kInt, "100", "step: epochs between decays", 1},
      {"scheduler.gamma", Kind::kFloat, "0.5", "step: decay factor", 0, kInf, true},
      {"scheduler.factor", Kind::kFloat, "0.5", "plateau: decay factor when the training loss stalls", 0, 1, true, true},
      {"scheduler.patience", Kind::kInt, "5", "plateau: epochs without improvement before decaying", 0},
      // training
      {"training.epochs", Kind::kInt, "20", "number of epochs", 1},
      {"training.loss", Kind::kString, "h1", "training loss (relative, summed over the batch)", -kInf, kInf, false, false, {"h1", "l2"}},
      {"training.eval_losses", Kind::kStringList, "[h1, l2]", "evaluation metrics (mean per-sample relative error)", -kInf, kInf, false, false, {"h1", "l2"}, 1, 2},
      {"training.eval_every", Kind::kInt, "1", "evaluate every n epochs (and after the last)", 1},
      {"training.checkpoint_every", Kind::kInt, "1", "write the latest checkpoint every n epochs (and after the last)", 1},
      {"training.seed", Kind::kInt, "0", "seed of the model initialization and the shuffling", 0},
      {"training.precision", Kind::kString, "fp32", "compute precision: fp32, tf32 (fp32 GEMMs on TF32 tensor cores), bf16 or fp16 (activations, saved tensors and GEMM inputs in that type, fp32 accumulation; fp16 adds a dynamic loss scaler that skips steps with non-finite gradients). Weights, optimizer state, losses and state dicts stay fp32. One step against fp32, relative: bf16 output 4e-3, gradients 1e-2; fp16 5e-4 and 8e-4", -kInf, kInf, false, false, {"fp32", "tf32", "bf16", "fp16"}},
      // device
      {"device.name", Kind::kString, "auto", "auto (CUDA when available), cpu, cuda or cuda:N"},
      // distributed (several processes under torchrun; README "Several GPUs")
      {"distributed.backend", Kind::kString, "auto", "c10d backend when launched by torchrun: auto (NCCL on CUDA, Gloo on the CPU), nccl or gloo", -kInf, kInf, false, false, {"auto", "nccl", "gloo"}},
      {"distributed.timeout_s", Kind::kFloat, "300", "seconds a rank waits for the others (rendezvous, each collective) before it stops with an error", 0, kInf, true},
      {"distributed.bucket_mib", Kind::kFloat, "4", "MiB of gradients per all-reduce bucket; a bucket is reduced as soon as backward has produced it", 0, kInf, true},
      // offload
      {"offload.policy", Kind::kString, "none", "activation memory policy: none (nothing moves; on CUDA with the fused kernels, blocks and MLPs store only their inputs and recompute the rest, as slim), slim (recompute cheap activations), all, blocks:K (first K stages, lifting first), recompute, recompute+offload, auto (fits offload.gpu_memory_limit)"},
      {"offload.gpu_memory_limit", Kind::kString, "''", "GPU memory budget for auto, e.g. 16GiB, 8GB ('': the device's free memory)"},
      {"offload.chunks", Kind::kInt, "1", "batch chunks per stage for the fixed policies (lowers the transient peak)", 1},
      {"offload.micro_batches", Kind::kInt, "1", "run each step as this many micro-batches whose gradients add up (the fixed policies; auto picks its own)", 1},
      {"offload.min_bytes", Kind::kInt, "1048576", "saved tensors smaller than this stay on the GPU", 0},
      {"offload.prefetch_depth", Kind::kInt, "1", "backward prefetches this many stages ahead", 0},
      {"offload.max_inflight_mib", Kind::kString, "auto", "device-to-host MiB in flight before forward waits (the back-pressure window, held in GPU memory), or auto: the fixed policies start at 1024 and, after a step whose forward waited on the link, grow it by what the link drained meanwhile, within offload.gpu_memory_limit or 90% of the GPU memory; auto policy plans keep 1024"},
      {"offload.max_prefetch_mib", Kind::kInt, "3072", "prefetched, not yet used MiB at most", 1},
      {"offload.host_memory_limit", Kind::kString, "''", "pinned host memory at most, e.g. 64GiB ('': no limit); beyond it activations stay on the GPU"},
      {"offload.timeline", Kind::kBool, "true", "write memory_timeline.csv: the GPU memory of one training step"},
      {"offload.compress", Kind::kString, "none", "host storage of offloaded float32 activations: none (lossless) or bf16 (half the PCIe bytes; rounded to bfloat16)"},
      {"offload.plan_cache", Kind::kString, "''", "directory where auto keeps its chosen plans for reuse by later runs ('': $FNO_PLAN_CACHE, else ~/.cache/fno/plans; none: no cache)"},
      // output
      {"output.dir", Kind::kString, "runs/darcy", "run directory (relative to the working directory); --out overrides"},
      {"output.progress", Kind::kString, "auto", "progress display: bar on a terminal, plain log lines, or none", -kInf, kInf, false, false, {"auto", "bar", "plain", "none"}},
  };
  return kSchema;
}

const Entry* find_entry(const std::string& key) {
  for (const auto& e : schema()) {
    if (key == e.key) return &e;
  }
  return nullptr;
}

// A value and where it came from ("file:line" or "--set k=v").
struct Located {
  YAML::Node node;
  std::string where;
};

std::string where_of(const std::string& origin, const YAML::Node& node) {
  const auto mark = node.Mark();
  if (mark.line < 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1);
}

[[noreturn]] void error(const std::string& where, const std::string& key, const std::string& msg) {
  throw ConfigError(where + ": " + key + ": " + msg);
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

std::string range_text(const Entry& e) {
  std::ostringstream s;
  const bool lo = std::isfinite(e.min), hi = std::isfinite(e.max);
  if (lo && hi) {
    s << " in " << (e.min_open ? "(" : "[") << e.min << ", " << e.max << (e.max_open ? ")" : "]");
  } else if (lo) {
    s << (e.min_open ? " > " : " >= ") << e.min;
  } else if (hi) {
    s << (e.max_open ? " < " : " <= ") << e.max;
  }
  return s.str();
}

void check_range(const Entry& e, double v, const std::string& where, const std::string& key,
                 const std::string& text, const char* what) {
  const bool bad = (e.min_open ? v <= e.min : v < e.min) || (e.max_open ? v >= e.max : v > e.max) ||
                   std::isnan(v);
  if (bad) error(where, key, std::string("expected ") + what + range_text(e) + ", got " + text);
}

int64_t to_int(const Entry& e, const YAML::Node& n, const std::string& where, const std::string& key) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
    error(where, key, std::string("expected an integer") + range_text(e) + ", got '" + scalar_text(n) + "'");
  }
  check_range(e, static_cast<double>(v), where, key, n.Scalar(), "an integer");
  return v;
}

double to_float(const Entry& e, const YAML::Node& n, const std::string& where, const std::string& key) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || std::isinf(v)) {
    error(where, key, std::string("expected a number") + range_text(e) + ", got '" + scalar_text(n) + "'");
  }
  check_range(e, v, where, key, n.Scalar(), "a number");
  return v;
}

bool to_bool(const YAML::Node& n, const std::string& where, const std::string& key) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    error(where, key, "expected true or false, got '" + scalar_text(n) + "'");
  }
  return v;
}

std::string to_string(const Entry& e, const YAML::Node& n, const std::string& where,
                      const std::string& key) {
  if (!(n.IsScalar() || n.IsNull())) error(where, key, "expected a string, got " + scalar_text(n));
  const std::string v = n.IsNull() ? "" : n.Scalar();
  if (!e.choices.empty()) {
    bool ok = false;
    std::string list;
    for (const auto& c : e.choices) {
      ok = ok || c == v;
      list += (list.empty() ? "" : ", ") + c;
    }
    if (!ok) error(where, key, "unknown value '" + v + "' (expected one of: " + list + ")");
  }
  return v;
}

const YAML::Node& check_list(const Entry& e, const YAML::Node& n, const std::string& where,
                             const std::string& key) {
  if (!n.IsSequence()) error(where, key, "expected a list, got '" + scalar_text(n) + "'");
  const int len = static_cast<int>(n.size());
  if (len < e.min_len || len > e.max_len) {
    std::ostringstream s;
    s << "expected a list of " << e.min_len;
    if (e.max_len != e.min_len) s << " to " << e.max_len;
    s << " entries, got " << len;
    error(where, key, s.str());
  }
  return n;
}

// Where a list item came from: its own line in the file, else the list's origin.
std::string item_where(const Located& list, const std::string& origin, const YAML::Node& item) {
  const bool from_file = list.where.rfind(origin + ":", 0) == 0;
  return from_file ? where_of(origin, item) : list.where;
}

// Schema key -> its value (from the file, --set, or the default).
using Values = std::map<std::string, Located>;

// A mapping key as a name; YAML also allows lists, maps and nulls as keys.
std::string key_name(const YAML::Node& key, const std::string& origin, const std::string& within) {
  if (!key.IsScalar()) {
    throw ConfigError(where_of(origin, key) + ": " + within + ": keys must be plain names, got " +
                      scalar_text(key));
  }
  return key.Scalar();
}

Values read_document(const YAML::Node& root, const std::string& origin) {
  Values values;
  if (root.IsNull()) throw ConfigError(origin + ": empty config (expected sections model, data, ...)");
  if (!root.IsMap()) throw ConfigError(where_of(origin, root) + ": expected a mapping of sections, got " + scalar_text(root));
  for (const auto& section : root) {
    const std::string name = key_name(section.first, origin, "(top level)");
    bool known = false;
    for (const auto& e : schema()) known = known || std::string(e.key).rfind(name + ".", 0) == 0;
    if (!known) {
      throw ConfigError(where_of(origin, section.first) + ": " + name +
                        ": unknown section (expected model, data, optimizer, scheduler, training, device, offload, output)");
    }
    if (!section.second.IsMap()) {
      throw ConfigError(where_of(origin, section.second) + ": " + name + ": expected a mapping of keys, got " +
                        scalar_text(section.second));
    }
    for (const auto& item : section.second) {
      const std::string key = name + "." + key_name(item.first, origin, name);
      if (find_entry(key) == nullptr) {
        throw ConfigError(where_of(origin, item.first) + ": " + key + ": unknown key");
      }
      values[key] = {item.second, where_of(origin, item.second)};
    }
  }
  return values;
}

void apply_override(Values& values, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set " + text + ": expected section.key=value");
  }
  const std::string key = text.substr(0, eq);
  if (find_entry(key) == nullptr) throw ConfigError("--set " + text + ": " + key + ": unknown key");
  YAML::Node node;
  try {
    node = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + text + ": " + key + ": malformed value: " + e.msg);
  }
  values[key] = {node, "--set " + text};
}

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p[0] == '/' || base.empty()) return p;
  return base + "/" + p;
}

// The absolute directory of `path` (so a run's config.yaml works from anywhere).
std::string absolute_dir(const std::string& path) {
  std::string dir = dir_of(path);
  if (!dir.empty() && dir[0] == '/') return dir;
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) return dir;
  return dir == "." ? std::string(buf) : std::string(buf) + "/" + dir;
}

// Builds the RunConfig and the resolved YAML from validated values; data file
// paths are resolved against base_dir.
RunConfig build(const Values& given, const std::string& origin, const std::string& base_dir) {
  RunConfig cfg;
  YAML::Node resolved;
  auto value = [&](const Entry& e) -> Located {
    auto it = given.find(e.key);
    if (it != given.end()) return it->second;
    return {YAML::Load(e.default_yaml), origin + " (default)"};
  };
  for (const auto& e : schema()) {
    const Located v = value(e);
    const std::string key = e.key;
    const auto dot = key.find('.');
    YAML::Node out;
    switch (e.kind) {
      case Kind::kInt: out = to_int(e, v.node, v.where, key); break;
      case Kind::kFloat: out = to_float(e, v.node, v.where, key); break;
      case Kind::kBool: out = to_bool(v.node, v.where, key); break;
      case Kind::kString:
        out = to_string(e, v.node, v.where, key);
        if (key == "data.train_file") out = resolve(base_dir, out.as<std::string>());
        break;
      case Kind::kIntList:
        out = YAML::Node(YAML::NodeType::Sequence);
        for (const auto& item : check_list(e, v.node, v.where, key)) out.push_back(to_int(e, item, item_where(v, origin, item), key));
        break;
      case Kind::kFloatList:
        out = YAML::Node(YAML::NodeType::Sequence);
        for (const auto& item : check_list(e, v.node, v.where, key)) out.push_back(to_float(e, item, item_where(v, origin, item), key));
        break;
      case Kind::kStringList:
        out = YAML::Node(YAML::NodeType::Sequence);
        for (const auto& item : check_list(e, v.node, v.where, key)) out.push_back(to_string(e, item, item_where(v, origin, item), key));
        break;
      case Kind::kTests: {
        out = YAML::Node(YAML::NodeType::Sequence);
        const auto& list = check_list(e, v.node, v.where, key);
        for (size_t i = 0; i < list.size(); ++i) {
          const auto& item = list[i];
          const std::string item_key = key + "[" + std::to_string(i) + "]";
          const std::string iw = item_where(v, origin, item);
          if (!item.IsMap()) error(iw, item_key, "expected a mapping {file, name, n_samples, batch_size}");
          YAML::Node test;
          for (const auto& kv : item) {
            const std::string k = key_name(kv.first, origin, item_key);
            bool known = false;
            for (const auto& te : test_entries()) known = known || k == te.key;
            if (!known) error(iw, item_key + "." + k, "unknown key (expected file, name, n_samples, batch_size)");
          }
          for (const auto& te : test_entries()) {
            const YAML::Node n = item[te.key] ? item[te.key] : YAML::Load(te.default_yaml);
            const std::string k = item_key + "." + te.key;
            if (te.kind == Kind::kInt) {
              test[te.key] = to_int(te, n, iw, k);
            } else if (std::string(te.key) == "file") {
              test[te.key] = resolve(base_dir, to_string(te, n, iw, k));
            } else {
              test[te.key] = to_string(te, n, iw, k);
            }
          }
          if (test["file"].as<std::string>().empty()) error(iw, item_key + ".file", "missing (every test set needs a file)");
          if (test["n_samples"].as<int64_t>() == 0) error(iw, item_key + ".n_samples", "expected -1 (all) or >= 1, got 0");
          out.push_back(test);
        }
        break;
      }
    }
    resolved[key.substr(0, dot)][key.substr(dot + 1)] = out;
  }

  const auto r = [&](const char* k) { return resolved[std::string(k).substr(0, std::string(k).find('.'))][std::string(k).substr(std::string(k).find('.') + 1)]; };
  // model
  cfg.model = FNOOptions(r("model.n_modes").as<std::vector<int64_t>>(), r("model.in_channels").as<int64_t>(),
                         r("model.out_channels").as<int64_t>(), r("model.hidden_channels").as<int64_t>())
                  .n_layers(r("model.n_layers").as<int64_t>())
                  .lifting_channel_ratio(r("model.lifting_channel_ratio").as<double>())
                  .projection_channel_ratio(r("model.projection_channel_ratio").as<double>())
                  .positional_embedding(r("model.positional_embedding").as<bool>())
                  .channel_mlp_expansion(r("model.channel_mlp_expansion").as<double>())
                  .domain_padding(r("model.domain_padding").as<std::vector<double>>());
  const auto pad = cfg.model.domain_padding();
  if (!pad.empty() && pad.size() != 1 && pad.size() != cfg.model.n_modes().size()) {
    const auto v = value(*find_entry("model.domain_padding"));
    error(v.where, "model.domain_padding", "needs 0, 1 or " + std::to_string(cfg.model.n_modes().size()) +
                                                " entries (one per spatial dim), got " + std::to_string(pad.size()));
  }
  // data
  cfg.train_file = r("data.train_file").as<std::string>();
  if (cfg.train_file.empty()) error(value(*find_entry("data.train_file")).where, "data.train_file", "missing (the training data file)");
  cfg.n_train = r("data.n_train").as<int64_t>();
  if (cfg.n_train == 0) error(value(*find_entry("data.n_train")).where, "data.n_train", "expected -1 (all) or >= 1, got 0");
  cfg.batch_size = r("data.batch_size").as<int64_t>();
  cfg.shuffle = r("data.shuffle").as<bool>();
  cfg.subsample = r("data.subsample").as<int64_t>();
  cfg.x_key = r("data.x_key").as<std::string>();
  cfg.y_key = r("data.y_key").as<std::string>();
  cfg.encode_input = r("data.encode_input").as<bool>();
  cfg.encode_output = r("data.encode_output").as<bool>();
  for (const auto& t : r("data.test")) {
    cfg.tests.push_back({t["file"].as<std::string>(), t["name"].as<std::string>(), t["n_samples"].as<int64_t>(),
                         t["batch_size"].as<int64_t>()});
  }
  cfg.n_predictions = r("data.n_predictions").as<int64_t>();
  // optimizer
  cfg.optimizer = r("optimizer.name").as<std::string>();
  cfg.lr = r("optimizer.lr").as<double>();
  cfg.weight_decay = r("optimizer.weight_decay").as<double>();
  const auto betas = r("optimizer.betas").as<std::vector<double>>();
  cfg.beta1 = betas[0];
  cfg.beta2 = betas[1];
  cfg.eps = r("optimizer.eps").as<double>();
  // scheduler
  cfg.scheduler = r("scheduler.name").as<std::string>();
  cfg.t_max = r("scheduler.T_max").as<int64_t>();
  cfg.eta_min = r("scheduler.eta_min").as<double>();
  cfg.step_size = r("scheduler.step_size").as<int64_t>();
  cfg.gamma = r("scheduler.gamma").as<double>();
  cfg.plateau_factor = r("scheduler.factor").as<double>();
  cfg.plateau_patience = r("scheduler.patience").as<int64_t>();
  // training
  cfg.epochs = r("training.epochs").as<int64_t>();
  cfg.train_loss = r("training.loss").as<std::string>();
  cfg.eval_losses = r("training.eval_losses").as<std::vector<std::string>>();
  cfg.eval_every = r("training.eval_every").as<int64_t>();
  cfg.checkpoint_every = r("training.checkpoint_every").as<int64_t>();
  cfg.seed = r("training.seed").as<int64_t>();
  cfg.precision = r("training.precision").as<std::string>();
  // device, output
  cfg.device = r("device.name").as<std::string>();
  if (!(cfg.device == "auto" || cfg.device == "cpu" || cfg.device == "cuda" ||
        (cfg.device.rfind("cuda:", 0) == 0 && cfg.device.size() > 5 &&
         cfg.device.find_first_not_of("0123456789", 5) == std::string::npos))) {
    error(value(*find_entry("device.name")).where, "device.name",
          "unknown value '" + cfg.device + "' (expected auto, cpu, cuda or cuda:N)");
  }
  cfg.out_dir = r("output.dir").as<std::string>();
  if (cfg.out_dir.empty()) error(value(*find_entry("output.dir")).where, "output.dir", "must not be empty");
  cfg.progress = r("output.progress").as<std::string>();
  // offload
  cfg.offload_policy = r("offload.policy").as<std::string>();
  try {
    fno::offload::parse_policy(cfg.offload_policy);
  } catch (const std::invalid_argument& e) {
    error(value(*find_entry("offload.policy")).where, "offload.policy", e.what());
  }
  const auto bytes_key = [&](const char* key) -> int64_t {
    const auto text = r(key).as<std::string>();
    if (text.empty()) return 0;
    try {
      return fno::offload::parse_bytes(text);
    } catch (const std::invalid_argument& e) {
      error(value(*find_entry(key)).where, key, e.what());
    }
    return 0;
  };
  cfg.gpu_memory_limit = bytes_key("offload.gpu_memory_limit");
  cfg.host_memory_limit = bytes_key("offload.host_memory_limit");
  cfg.offload_chunks = r("offload.chunks").as<int64_t>();
  cfg.micro_batches = r("offload.micro_batches").as<int64_t>();
  cfg.offload_min_bytes = r("offload.min_bytes").as<int64_t>();
  cfg.prefetch_depth = r("offload.prefetch_depth").as<int64_t>();
  {
    const char* key = "offload.max_inflight_mib";
    try {
      cfg.max_inflight_mib = parse_inflight_mib(r(key).as<std::string>());
    } catch (const std::invalid_argument& e) {
      error(value(*find_entry(key)).where, key, e.what());
    }
  }
  cfg.max_prefetch_mib = r("offload.max_prefetch_mib").as<int64_t>();
  cfg.offload_timeline = r("offload.timeline").as<bool>();
  cfg.offload_compress = r("offload.compress").as<std::string>();
  try {
    fno::offload::parse_compress(cfg.offload_compress);
  } catch (const std::invalid_argument& e) {
    error(value(*find_entry("offload.compress")).where, "offload.compress", e.what());
  }
  cfg.plan_cache = r("offload.plan_cache").as<std::string>();
  cfg.dist_backend = r("distributed.backend").as<std::string>();
  cfg.dist_timeout_s = r("distributed.timeout_s").as<double>();
  cfg.dist_bucket_mib = r("distributed.bucket_mib").as<double>();

  YAML::Emitter emitter;
  emitter << resolved;
  cfg.resolved_yaml = std::string(emitter.c_str()) + "\n";
  return cfg;
}

}  // namespace

int64_t parse_inflight_mib(const std::string& text) {
  if (text == "auto") return 0;
  std::size_t used = 0;
  int64_t mib = 0;
  try {
    mib = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || mib < 1 || mib > (int64_t{1} << 30)) {
    throw std::invalid_argument("expected auto or a whole number of MiB in [1, 2^30], got '" +
                                text + "'");
  }
  return mib;
}

namespace {

RunConfig parse_node(const YAML::Node& root, const std::string& origin,
                     const std::vector<std::string>& overrides, const std::string& base_dir) {
  RunConfig cfg;
  try {
    Values values = read_document(root, origin);
    for (const auto& o : overrides) apply_override(values, o);
    cfg = build(values, origin, base_dir);
  } catch (const YAML::Exception& e) {
    // Anything the checks above did not foresee still ends as a ConfigError.
    throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  cfg.base_dir = base_dir.empty() ? "." : base_dir;
  return cfg;
}

}  // namespace

RunConfig parse_config(const std::string& yaml, const std::string& origin,
                       const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
  return parse_node(root, origin, overrides, /*base_dir=*/"");
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw ConfigError(path + ": cannot read the config file (" +
                      (::stat(path.c_str(), &st) != 0 ? "no such file" : "not a regular file") + ")");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot read the config file (missing, a directory, or unreadable)");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
  return parse_node(root, path, overrides, absolute_dir(path));
}

std::string config_schema_markdown() {
  auto kind_name = [](Kind k) {
    switch (k) {
      case Kind::kInt: return "int";
      case Kind::kFloat: return "float";
      case Kind::kBool: return "bool";
      case Kind::kString: return "string";
      case Kind::kIntList: return "list of int";
      case Kind::kFloatList: return "list of float";
      case Kind::kStringList: return "list of string";
      case Kind::kTests: return "list of test sets";
    }
    return "";
  };
  auto constraint = [&](const Entry& e) {
    std::string c = range_text(e);
    if (!c.empty()) c = "value" + c;
    if (!e.choices.empty()) {
      c = "one of:";
      for (const auto& x : e.choices) c += " `" + x + "`";
    }
    return c;
  };
  std::ostringstream s;
  s << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& e : schema()) {
    s << "| `" << e.key << "` | " << kind_name(e.kind) << " | `" << e.default_yaml << "` | "
      << constraint(e) << " | " << e.doc << " |\n";
  }
  s << "\nEach entry of `data.test`:\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& e : test_entries()) {
    s << "| `" << e.key << "` | " << kind_name(e.kind) << " | `" << e.default_yaml << "` | "
      << constraint(e) << " | " << e.doc << " |\n";
  }
  return s.str();
}

}  // namespace fno
