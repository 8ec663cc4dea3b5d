// The config schema's parts, private to train/: a key of the schema
// (config_schema.cpp declares each one once: its field, its documentation and
// its checks; its type, default and reading follow from the field), and the
// checks of a YAML value against a key (config_values.cpp), which config.cpp
// runs over a file and its overrides.
#pragma once

#include <fno_train/config.h>

#include <yaml-cpp/yaml.h>

#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace fno::config {

/// A key's YAML type.
enum class Kind { kInt, kFloat, kBool, kString, kIntList, kFloatList, kStringList, kTests };

constexpr double kInf = std::numeric_limits<double>::infinity();

/// What a key's value must be, and how the reference shows it.
struct KeySpec {
  std::string name;  // "section.name" ("file" for a key of a data.test entry)
  Kind kind = Kind::kString;
  std::string doc;
  double min = -kInf;  // numeric range of the value or of each list item
  double max = kInf;
  bool min_open = false;  // the range excludes min (max)
  bool max_open = false;
  std::vector<std::string> choices;  // allowed words (kString, kStringList)
  int min_len = 0;                   // list lengths
  int max_len = 1 << 20;
  bool path = false;         // a data file: relative to the config's folder, or --set's directory
  std::string default_yaml;  // the default-constructed config's value, as YAML text
  std::string sample;        // a valid value other than the default, as YAML text ('': none)

  /// Whether v lies in [min, max] (or the open ends).
  bool in_range(double v) const;
  /// " >= 1", " in [1, 1000000000]", " > 0", or "" when unbounded.
  std::string range_text() const;
};

/// A key and how it reaches its field of Root (RunConfig, or TestSetConfig for
/// a data.test entry).
template <typename Root>
struct Key : KeySpec {
  /// Stores the key's checked value (its node of the resolved YAML) in `root`;
  /// std::invalid_argument carries the message of the key's own parse or check.
  std::function<void(Root&, const YAML::Node&)> read;
};

/// The sections' keys, in the reference's order.
const std::vector<Key<RunConfig>>& schema();
/// The keys of one data.test entry.
const std::vector<Key<TestSetConfig>>& test_keys();
/// The key named `name`, or nullptr.
const Key<RunConfig>* find_key(const std::string& name);

// ---- config_values.cpp: a YAML value checked against its key ----

/// A value and where it came from ("file:line", "--set k=v", "file (default)").
struct Located {
  YAML::Node node;
  std::string where;
};
/// Schema key -> the value given in the file or by --set.
using Values = std::map<std::string, Located>;

/// Throws ConfigError "where: key: msg".
[[noreturn]] void error(const std::string& where, const std::string& key, const std::string& msg);
/// "origin:line" of a node (origin alone when it has no line).
std::string where_of(const std::string& origin, const YAML::Node& node);
/// A scalar's text, or "a list", "a mapping", "nothing".
std::string scalar_text(const YAML::Node& n);
/// A mapping key as a name (ConfigError when it is a list, map or null).
std::string key_name(const YAML::Node& key, const std::string& origin, const std::string& within);
/// The candidate nearest to `word` in edits, or "" when none is near.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);
/// Whether a value came from the command line (--set).
bool from_command_line(const Located& v);
/// The absolute directory of `path`.
std::string absolute_dir(const std::string& path);
/// A key's value: given, else its default.
Located value_of(const Values& given, const KeySpec& key, const std::string& origin);
/// One key's value, checked against it, as the resolved YAML holds it (paths
/// resolved against base_dir, or --set's against the current directory).
YAML::Node resolve_entry(const KeySpec& key, const Located& v, const std::string& origin,
                         const std::string& base_dir);
/// The tag resolve_entry puts on a string that YAML 1.1 reads as a bool; the
/// resolved YAML writes it double-quoted.
extern const char* const kStrTag;

}  // namespace fno::config
