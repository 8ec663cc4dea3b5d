// PredictRun::load_model (predict_run.h): the model's settings, its weights
// and the run's normalizers. A run directory gives them all (config.yaml,
// model.pt or --checkpoint, normalizers.pt); a state dict file (--model FILE)
// takes its settings from --model-config and --set model.KEY=VALUE, and
// applies no normalizers.
#include <fno/serialize.h>
#include <fno_train/config.h>

#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>

#include "predict_run.h"
#include "predict_support.h"

namespace fno::detail {

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A model's settings alone: a config file in fno_train's keys (--model-config,
// of which the model: section matters), or none, and the --set model.KEY=VALUE
// settings over it, parsed as fno_train parses its --set. Without
// data.train_file a config still parses (`placeholder` fills it in). A state
// dict carries no normalizers: none apply.
RunConfig load_model_config(const std::string& path, const std::vector<std::string>& settings,
                            const std::string& placeholder) {
  RunConfig cfg;
  const auto parse = [&](const std::vector<std::string>& overrides) {
    return path.empty() ? parse_config("{}", "--set", overrides) : load_config(path, overrides);
  };
  try {
    cfg = parse(settings);
  } catch (const ConfigError& e) {
    if (std::string(e.what()).find("data.train_file") == std::string::npos) throw;
    auto with_file = settings;
    with_file.push_back("data.train_file=" + placeholder);
    cfg = parse(with_file);
  }
  cfg.data.encode_input = false;
  cfg.data.encode_output = false;
  return cfg;
}

}  // namespace

void PredictRun::load_config_of_model() {
  for (const auto& s : o.model_settings) {
    if (s.rfind("model.", 0) != 0) {
      throw PredictUsageError(
          "--set " + s + ": only the model's settings (model.KEY=VALUE) apply to a state dict");
    }
  }
  state_dict_model = !o.model_config.empty() || !o.model_settings.empty();
  if (state_dict_model && !o.checkpoint.empty()) {
    throw PredictUsageError(
        "--checkpoint: with --model-config or --set, --model names the weights");
  }
  if (state_dict_model && std::filesystem::is_directory(o.run_dir)) {
    throw PredictUsageError("--model " + o.run_dir +
                            ": with --model-config or --set, --model names a state dict file (a "
                            "run directory's model is its config.yaml's)");
  }
  cfg_path = state_dict_model ? o.model_config : o.run_dir + "/config.yaml";
  if (!cfg_path.empty() && !exists(cfg_path)) {
    throw std::runtime_error(state_dict_model
                                 ? cfg_path + ": no such file"
                                 : o.run_dir + ": not a run directory (no config.yaml)");
  }
  cfg_text = !state_dict_model          ? cfg_path + "'s model"
             : o.model_config.empty()   ? std::string("the --set model settings")
             : o.model_settings.empty() ? cfg_path + "'s model"
                                        : cfg_path + "'s model with --set";
  if (!state_dict_model) {
    cfg = load_config(cfg_path);
    return;
  }
  // (a model's settings need no training data: data.train_file is filled in
  // when the file leaves it out)
  try {
    cfg = load_model_config(o.model_config, o.model_settings, o.run_dir);
  } catch (const ConfigError& e) {
    // A --set value that does not parse is the command line's.
    if (std::string(e.what()).find("--set ") != std::string::npos) {
      throw PredictUsageError(e.what());
    }
    throw;
  }
}

void PredictRun::load_model() {
  load_config_of_model();
  if (cfg.data.problem == DataProblem::kNavierStokes) ns.emplace(cfg);
  precision = o.precision.empty() ? cfg.training.precision : parse_precision(o.precision);
  device = pick_device(o.device);
  matmul.emplace(precision);

  // The weights.
  weights_path = state_dict_model ? o.run_dir
                                  : (o.checkpoint.empty() ? o.run_dir + "/model.pt" : o.checkpoint);
  if (!exists(weights_path)) {
    throw std::runtime_error(weights_path + ": no such file" +
                             (o.checkpoint.empty() && !state_dict_model
                                  ? " (the run has not finished; name a "
                                    "checkpoint with --checkpoint)"
                                  : ""));
  }
  TensorDict weights_file;
  model = load_model_weights(cfg.model, precision, weights_path, cfg_text, device, weights_file);
  r.normalizers = load_normalizers(cfg, o.run_dir, weights_file, weights_path, in_norm, out_norm);
}

}  // namespace fno::detail
