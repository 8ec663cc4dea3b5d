// Reading a config: a YAML file and its --set overrides, checked key by key
// against the schema (config_schema.cpp, config_values.cpp), then across keys;
// the notes on settings that do less than they may seem to; the resolved YAML.
#include <fno_train/config.h>

#include <fno_offload/planner.h>

#include "config_keys.h"

#include <sys/stat.h>

#include <cstdio>
#include <sstream>
#include <utility>

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

namespace config {
namespace {

// " (did you mean K?)" for the known key nearest to an unknown `key`, or "".
std::string did_you_mean(const std::string& key) {
  std::vector<std::string> keys;
  for (const auto& e : schema()) keys.emplace_back(e.name);
  const auto best = nearest(key, keys);
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

Values read_document(const YAML::Node& root, const std::string& origin) {
  Values values;
  if (root.IsNull())
    throw ConfigError(origin + ": empty config (expected sections model, data, ...)");
  if (!root.IsMap())
    throw ConfigError(where_of(origin, root) + ": expected a mapping of sections, got " +
                      scalar_text(root));
  for (const auto& section : root) {
    const std::string name = key_name(section.first, origin, "(top level)");
    bool known = false;
    for (const auto& e : schema()) known = known || std::string(e.name).rfind(name + ".", 0) == 0;
    if (!known) {
      const auto best = nearest(name, {"model", "data", "optimizer", "scheduler", "training",
                                       "device", "distributed", "offload", "output"});
      throw ConfigError(where_of(origin, section.first) + ": " + name + ": unknown section (" +
                        (best.empty() ? "" : "did you mean " + best + "? ") +
                        "expected model, data, optimizer, scheduler, training, device, "
                        "distributed, offload, output)");
    }
    if (!section.second.IsMap()) {
      throw ConfigError(where_of(origin, section.second) + ": " + name +
                        ": expected a mapping of keys, got " + scalar_text(section.second));
    }
    for (const auto& item : section.second) {
      const std::string key = name + "." + key_name(item.first, origin, name);
      if (find_key(key) == nullptr) {
        throw ConfigError(where_of(origin, item.first) + ": " + key + ": unknown key" +
                          did_you_mean(key));
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
  if (find_key(key) == nullptr) {
    throw ConfigError("--set " + text + ": " + key + ": unknown key" + did_you_mean(key));
  }
  YAML::Node node;
  try {
    node = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + text + ": " + key + ": malformed value: " + e.msg);
  }
  values[key] = {node, "--set " + text};
}

// The resolved configuration: every key's checked value (defaults filled in),
// by section and name, and where each came from for the checks that follow.
struct Resolved {
  YAML::Node yaml;
  const Values& given;
  std::string origin;

  YAML::Node operator()(const std::string& key) const {
    const auto dot = key.find('.');
    YAML::Node section = yaml[key.substr(0, dot)];
    return section[key.substr(dot + 1)];
  }
  template <typename T>
  T as(const std::string& key) const {
    return (*this)(key).as<T>();
  }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    error(value_of(given, *find_key(key), origin).where, key, msg);
  }
};

// The model's options against each other.
void check_model(const Resolved& r, const FNOOptions& model) {
  if (model.single_gelu() && model.use_channel_mlp()) {
    r.fail("model.single_gelu",
           "needs model.use_channel_mlp: false (it sets the GELUs between "
           "blocks without channel MLPs)");
  }
  // The spectral weights of a block, hidden^2 x the modes, counted in doubles
  // (they cannot overflow): past 2^53 no size is counted exactly, nor allocated.
  double weights =
      static_cast<double>(model.hidden_channels()) * static_cast<double>(model.hidden_channels());
  for (const int64_t m : model.n_modes()) weights *= static_cast<double>(m);
  if (weights > 9007199254740992.0) {
    std::ostringstream why;
    why << "hidden_channels^2 x the modes' product is " << weights
        << " spectral weights per block, over 2^53: fewer modes or channels";
    r.fail("model.n_modes", why.str());
  }
  const auto pad = model.domain_padding();
  if (!pad.empty() && pad.size() != 1 && pad.size() != model.n_modes().size()) {
    r.fail("model.domain_padding", "needs 0, 1 or " + std::to_string(model.n_modes().size()) +
                                       " entries (one per spatial dim), got " +
                                       std::to_string(pad.size()));
  }
}

// Navier-Stokes across sections: the records are one array (no y_key); the
// recurrent rollout runs the model t_out times per step, so it trains on raw
// records (a prediction becomes an input), under policy none in one piece, and
// its trajectory has an L2 error only.
void check_navier_stokes(const Resolved& r, const RunConfig& c) {
  const auto& d = c.data;
  if (d.problem != DataProblem::kNavierStokes) return;
  for (const auto& [key, layout] :
       {std::pair{"data.x_layout", d.x_layout}, {"data.y_layout", d.y_layout}}) {
    if (layout != data::Layout::kGrid) {
      r.fail(key,
             "not used with data.problem ns (the records (N, R, R, T) give data.t_in "
             "channels), got '" +
                 to_string(layout) + "'");
    }
  }
  if (!d.y_key.empty()) {
    r.fail("data.y_key",
           "not used with data.problem ns (data.x_key names the records), got '" + d.y_key + "'");
  }
  if (d.ns_mode != NsMode::kRecurrent) return;
  for (const auto& [key, on] :
       {std::pair{"data.encode_input", d.encode_input}, {"data.encode_output", d.encode_output}}) {
    if (on) {
      r.fail(key,
             "must be false with data.ns_mode recurrent: the rollout feeds each prediction "
             "back as an input, so it trains on the raw records (as the paper's FNO-2D)");
    }
  }
  if (c.offload.policy.kind != offload::Policy::Kind::kNone) {
    r.fail("offload.policy", "'" + c.offload.policy.text +
                                 "' does not apply to data.ns_mode recurrent (a step runs the "
                                 "model t_out times and backward once through all of them); "
                                 "use none, or data.ns_mode space_time");
  }
  if (c.offload.micro_batches != 1) {
    r.fail("offload.micro_batches",
           "must be 1 with data.ns_mode recurrent (the rollout runs as one piece), got " +
               std::to_string(c.offload.micro_batches));
  }
  for (const auto loss : c.training.eval_losses) {
    if (loss != LossName::kL2) {
      r.fail("training.eval_losses",
             "'" + to_string(loss) +
                 "' is not defined over a rollout's trajectory; use [l2] with data.ns_mode "
                 "recurrent");
    }
  }
}

// Benchmark formats across sections: the files' own fields make the pairs, so
// the keys of the other loaders do not apply.
void check_benchmark(const Resolved& r, const RunConfig& c) {
  const auto& d = c.data;
  const bool well = d.format == DataFormat::kWell;
  if (d.format == DataFormat::kAuto && !d.scalars.empty()) {
    r.fail("data.scalars", "needs a benchmark data.format (well, pdearena), got auto");
  }
  if (!well && d.normalization == data::NormalizerMode::kBenchmark) {
    r.fail("data.normalization",
           "benchmark needs data.format well (The Well ships stats.yaml), "
           "got data.format " +
               to_string(d.format));
  }
  if (c.domain_padding_auto > 0) {
    if (!well) {
      r.fail("model.domain_padding_auto",
             "needs data.format well (The Well's files declare "
             "their boundary conditions), got data.format " +
                 to_string(d.format));
    }
    if (!c.model.domain_padding().empty()) {
      r.fail("model.domain_padding_auto",
             "sets model.domain_padding from the files; model.domain_padding must be [] then");
    }
  }
  if (d.format == DataFormat::kAuto) {
    if (d.stream == DataStream::kOn) {
      r.fail("data.stream",
             "on streams the benchmark formats' windows (data.format well, "
             "pdebench or pdearena); data.format is auto");
    }
    return;
  }
  const std::string with = " with data.format " + to_string(d.format);
  if (d.problem != DataProblem::kDarcy) {
    r.fail("data.problem", "must be darcy (input/output pairs)" + with + " (data.history and "
                           "data.horizon make the pairs), got '" + to_string(d.problem) + "'");
  }
  for (const auto& [key, name] : {std::pair{"data.x_key", d.x_key}, {"data.y_key", d.y_key}}) {
    if (!name.empty()) r.fail(key, "not used" + with + " (data.fields names the fields), got '" + name + "'");
  }
  for (const auto& [key, layout] :
       {std::pair{"data.x_layout", d.x_layout}, {"data.y_layout", d.y_layout}}) {
    if (layout != data::Layout::kGrid) {
      r.fail(key, "not used" + with + " (the fields give the channels), got '" + to_string(layout) + "'");
    }
  }
}

// The offload policy against the model: blocks:K names at most its stages
// (the lifting, model.n_layers blocks, the projection).
void check_offload(const Resolved& r, const RunConfig& c) {
  const auto& p = c.offload.policy;
  const int64_t stages = c.model.n_layers() + 2;
  if (p.kind == offload::Policy::Kind::kBlocks && p.blocks > stages) {
    r.fail("offload.policy",
           "'" + p.text + "' names " + std::to_string(p.blocks) + " stages, but the model has " +
               std::to_string(stages) + " (the lifting, model.n_layers " +
               std::to_string(c.model.n_layers()) + " blocks, the projection); use K <= " +
               std::to_string(stages) + " (blocks:" + std::to_string(stages) + " is all)");
  }
}

// A byte count as "3.73 GiB".
std::string gib_text(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g GiB", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}

// RunConfig::notes: settings given (in the file or by --set, other than their
// defaults) that the chosen offload policy ignores, the byte sizes as read, and
// a training file given on the command line beside the config file's test sets.
std::vector<std::string> notes(const Resolved& r, const RunConfig& c) {
  std::vector<std::string> out;
  // Set to other than the default (a resumed run's config.yaml names every key).
  const auto given = [&](const std::string& key) {
    const YAML::Node def = YAML::Load(find_key(key)->default_yaml);
    return r.given.count(key) > 0 && r(key).Scalar() != (def.IsScalar() ? def.Scalar() : "");
  };
  using K = offload::Policy::Kind;
  const auto kind = c.offload.policy.kind;
  const std::string policy = "offload.policy " + c.offload.policy.text;
  // What moves activations to host memory, and what plans against a budget.
  const bool moves =
      kind == K::kAll || kind == K::kBlocks || kind == K::kRecomputeOffload || kind == K::kAuto;
  if (!moves) {
    for (const char* key :
         {"offload.host_memory_limit", "offload.min_bytes", "offload.prefetch_depth",
          "offload.max_inflight_mib", "offload.max_prefetch_mib", "offload.compress"}) {
      if (given(key)) {
        out.push_back(std::string(key) + ": ignored by " + policy +
                      " (it moves no activations to host memory)");
      }
    }
  }
  if (kind == K::kAuto) {
    for (const char* key : {"offload.chunks", "offload.micro_batches"}) {
      if (given(key))
        out.push_back(std::string(key) + ": ignored by " + policy + " (it picks its own)");
    }
  } else {
    for (const char* key : {"offload.plan_cache", "offload.search_seconds"}) {
      if (given(key)) {
        out.push_back(std::string(key) + ": ignored by " + policy + " (only auto plans)");
      }
    }
    if (c.offload.gpu_memory_limit > 0) {
      out.push_back("offload.gpu_memory_limit: " + policy +
                    " plans nothing against it (--offload auto does); it only bounds the data "
                    "kept on the GPU and the out-of-memory advice");
    }
  }
  for (const char* key : {"offload.gpu_memory_limit", "offload.host_memory_limit"}) {
    const auto text = r.as<std::string>(key);
    const int64_t bytes = key == std::string("offload.gpu_memory_limit")
                              ? c.offload.gpu_memory_limit
                              : c.offload.host_memory_limit;
    if (bytes > 0) {
      out.push_back(std::string(key) + ": '" + text + "' is " + std::to_string(bytes) +
                    " bytes = " + gib_text(bytes) + " (GB = 10^9 bytes, GiB = 2^30)");
    }
  }
  // data.host_memory_limit is what data.stream auto compares the windows against.
  if (c.data.host_memory_limit > 0 &&
      (c.data.format == DataFormat::kAuto || c.data.stream != DataStream::kAuto)) {
    out.push_back("data.host_memory_limit: ignored by " +
                  (c.data.format == DataFormat::kAuto
                       ? std::string("data.format auto (only benchmark formats stream)")
                       : "data.stream " + to_string(c.data.stream) + " (only auto compares)"));
  }
  // The training file from the command line, the test sets from the file.
  const auto train = value_of(r.given, *find_key("data.train_file"), r.origin);
  const auto tests = value_of(r.given, *find_key("data.test"), r.origin);
  if (from_command_line(train) && !from_command_line(tests) && !c.data.tests.empty()) {
    std::string files;
    for (const auto& t : c.data.tests) {
      files += (files.empty() ? "" : ", ") + t.file.substr(t.file.find_last_of('/') + 1);
    }
    out.push_back("data.train_file is set on the command line, but the test sets are still " +
                  r.origin + "'s (" + files +
                  "); set data.test too, e.g. --set 'data.test=[{file: " +
                  "test.h5}]', or --set data.test=[] for none");
  }
  return out;
}

// The resolved YAML as text; yaml-cpp writes a tagged scalar as `!<tag> off`:
// the strings resolve_entry tagged (plain words) go out double-quoted instead.
std::string yaml_text(const YAML::Node& yaml) {
  YAML::Emitter emitter;
  emitter << yaml;
  std::string text = emitter.c_str();
  const std::string tagged = std::string("!<") + kStrTag + "> ";
  for (size_t at = text.find(tagged); at != std::string::npos; at = text.find(tagged, at)) {
    const size_t word = at + tagged.size();
    const size_t end = text.find_first_of(" \n,]}", word);
    const size_t len = (end == std::string::npos ? text.size() : end) - word;
    text.replace(at, tagged.size() + len, "\"" + text.substr(word, len) + "\"");
  }
  return text + "\n";
}

// Builds the RunConfig and the resolved YAML from the given values; data file
// paths are resolved against base_dir. Every key is checked in the schema's
// order first, then read into its field (with its own checks), then the
// checks across keys.
RunConfig build(const Values& given, const std::string& origin, const std::string& base_dir) {
  Resolved r{YAML::Node(), given, origin};
  for (const auto& k : schema()) {
    const auto dot = k.name.find('.');
    r.yaml[k.name.substr(0, dot)][k.name.substr(dot + 1)] =
        resolve_entry(k, value_of(given, k, origin), origin, base_dir);
  }
  RunConfig cfg;
  for (const auto& k : schema()) {
    try {
      k.read(cfg, r(k.name));
    } catch (const std::invalid_argument& e) {
      r.fail(k.name, e.what());
    }
  }
  check_model(r, cfg.model);
  check_navier_stokes(r, cfg);
  check_benchmark(r, cfg);
  check_offload(r, cfg);
  cfg.notes = notes(r, cfg);
  cfg.resolved_yaml = yaml_text(r.yaml);
  return cfg;
}

}  // namespace
}  // namespace config

void record_setting(RunConfig& config, const std::string& key, const std::string& value) {
  // The resolved YAML is block style: "section:" at the margin, its keys two
  // spaces in; a list's items (or its "[]") on the lines below, further in.
  const auto dot = key.find('.');
  const std::string section = key.substr(0, dot) + ":";
  const std::string name = "  " + key.substr(dot + 1) + ":";
  std::istringstream in(config.resolved_yaml);
  std::string line, out;
  bool inside = false, replaced = false;
  while (std::getline(in, line)) {
    if (replaced && line.rfind("   ", 0) == 0) continue;  // the old value's lines
    replaced = false;
    if (!line.empty() && line[0] != ' ') {
      inside = line == section;
    } else if (inside && (line == name || line.rfind(name + " ", 0) == 0)) {
      line = name + " " + value;
      replaced = true;
    }
    out += line + "\n";
  }
  config.resolved_yaml = out;
}

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

using config::absolute_dir;

RunConfig parse_node(const YAML::Node& root, const std::string& origin,
                     const std::vector<std::string>& overrides, const std::string& base_dir) {
  RunConfig cfg;
  try {
    config::Values values = config::read_document(root, origin);
    for (const auto& o : overrides) config::apply_override(values, o);
    cfg = config::build(values, origin, base_dir);
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
    throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) +
                      ": malformed YAML: " + e.msg);
  }
  return parse_node(root, origin, overrides, /*base_dir=*/"");
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw ConfigError(path + ": cannot read the config file (" +
                      (::stat(path.c_str(), &st) != 0 ? "no such file" : "not a regular file") +
                      ")");
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

}  // namespace fno
