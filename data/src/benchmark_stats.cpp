// The statistics a benchmark ships: The Well's stats.yaml (the_well 1.2.0,
// data/normalization.py, ZScoreNormalization): mapping "mean", "std" (and
// "mean_delta", "std_delta", not used here) of field name -> a number, or a
// list (one per component of a vector field, nested for a tensor field).
#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "benchmark_internal.h"

namespace fno::data::bench {

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A statistic's values, flattened in order (a number, or nested lists).
void flatten(const YAML::Node& n, std::vector<double>& out) {
  if (n.IsSequence()) {
    for (const auto& item : n) flatten(item, out);
  } else {
    out.push_back(n.as<double>());
  }
}

}  // namespace

std::string find_stats_file(const std::string& dir, std::vector<std::string>* searched) {
  std::filesystem::path d(dir);
  for (int up = 0; up < 3; ++up) {
    d = d.lexically_normal();
    if (searched != nullptr) searched->push_back(d.string());
    if (is_file((d / "stats.yaml").string())) return (d / "stats.yaml").string();
    d /= "..";
  }
  return "";
}

std::pair<std::vector<double>, std::vector<double>> read_stats(
    const std::string& file,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& fields, double min_std) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(file + ": not readable as YAML: " + e.msg);
  }
  std::vector<double> means, stds;
  for (const char* stat : {"mean", "std"}) {
    const YAML::Node table = root.IsMap() ? root[stat] : YAML::Node();
    if (!table || !table.IsMap()) {
      throw std::runtime_error(file + ": no mapping '" + stat +
                               "' of field -> value (The Well's stats.yaml)");
    }
    auto& out = std::string(stat) == "mean" ? means : stds;
    for (const auto& [name, channels] : fields) {
      const YAML::Node v = table[name];
      if (!v) {
        throw std::runtime_error(file + ": " + stat + ": no field '" + name + "'");
      }
      std::vector<double> values;
      try {
        flatten(v, values);
      } catch (const YAML::Exception&) {
        throw std::runtime_error(file + ": " + stat + ": field '" + name + "' is not a number " +
                                 "or a list of numbers");
      }
      // One value for every channel of the field (broadcast), or one each.
      if (values.size() == 1) values.assign(channels.size(), values[0]);
      if (values.size() != channels.size()) {
        throw std::runtime_error(file + ": " + stat + ": field '" + name + "' holds " +
                                 std::to_string(values.size()) + " values for its " +
                                 std::to_string(channels.size()) + " channels (" + join(channels) +
                                 ")");
      }
      for (double x : values) out.push_back(std::string(stat) == "std" ? std::max(x, min_std) : x);
    }
  }
  return {means, stds};
}

}  // namespace fno::data::bench
