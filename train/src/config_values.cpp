// A YAML value checked against its key of the schema (config_keys.h): types,
// ranges, choices, list lengths, the entries of data.test, and data paths.
#include "config_keys.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace fno::config {

bool KeySpec::in_range(double v) const {
  return !((min_open ? v <= min : v < min) || (max_open ? v >= max : v > max) || std::isnan(v));
}

std::string KeySpec::range_text() const {
  std::ostringstream s;
  s.precision(17);  // bounds as written: 1000000000, not 1e+09
  const bool lo = std::isfinite(min), hi = std::isfinite(max);
  if (lo && hi) {
    s << " in " << (min_open ? "(" : "[") << min << ", " << max << (max_open ? ")" : "]");
  } else if (lo) {
    s << (min_open ? " > " : " >= ") << min;
  } else if (hi) {
    s << (max_open ? " < " : " <= ") << max;
  }
  return s.str();
}

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

namespace {

void check_range(const KeySpec& e, double v, const std::string& where, const std::string& key,
                 const std::string& text, const char* what) {
  if (!e.in_range(v)) {
    error(where, key, std::string("expected ") + what + e.range_text() + ", got " + text);
  }
}

int64_t to_int(const KeySpec& e, const YAML::Node& n, const std::string& where,
               const std::string& key) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
    error(where, key,
          std::string("expected an integer") + e.range_text() + ", got '" + scalar_text(n) + "'");
  }
  check_range(e, static_cast<double>(v), where, key, n.Scalar(), "an integer");
  return v;
}

double to_float(const KeySpec& e, const YAML::Node& n, const std::string& where,
                const std::string& key) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || std::isinf(v)) {
    error(where, key,
          std::string("expected a number") + e.range_text() + ", got '" + scalar_text(n) + "'");
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

std::string to_string(const KeySpec& e, const YAML::Node& n, const std::string& where,
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

const YAML::Node& check_list(const KeySpec& e, const YAML::Node& n, const std::string& where,
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

}  // namespace

// A mapping key as a name; YAML also allows lists, maps and nulls as keys.
std::string key_name(const YAML::Node& key, const std::string& origin, const std::string& within) {
  if (!key.IsScalar()) {
    throw ConfigError(where_of(origin, key) + ": " + within + ": keys must be plain names, got " +
                      scalar_text(key));
  }
  return key.Scalar();
}

// The edit distance (insertions, deletions, substitutions) between a and b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `word`, or "" when none is near: within a third of
// the word's length in edits (at least 2). A dotted key whose name is some
// other section's key ("training.batch_size") is near that key.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_cost = std::max<size_t>(2, word.size() / 3) + 1;
  const auto name_of = [](const std::string& k) {
    const auto dot = k.find('.');
    return dot == std::string::npos ? std::string() : k.substr(dot + 1);
  };
  for (const auto& c : candidates) {
    size_t cost = edit_distance(word, c);
    if (!name_of(word).empty() && name_of(word) == name_of(c)) cost = std::min<size_t>(cost, 1);
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

namespace {

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

// The current directory ("" when unknown).
std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof(buf)) == nullptr ? std::string() : std::string(buf);
}

// A data path: relative ones against the config's folder, or those given with
// --set against the current directory.
std::string resolve_path(const Located& v, const std::string& base_dir, const std::string& p) {
  return resolve(from_command_line(v) ? current_dir() : base_dir, p);
}

}  // namespace

// Whether a value came from the command line (--set), whose relative paths
// resolve against the current directory rather than the config's folder.
bool from_command_line(const Located& v) { return v.where.rfind("--set ", 0) == 0; }

// The absolute directory of `path` (so a run's config.yaml works from anywhere).
std::string absolute_dir(const std::string& path) {
  std::string dir = dir_of(path);
  if (!dir.empty() && dir[0] == '/') return dir;
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) return dir;
  return dir == "." ? std::string(buf) : std::string(buf) + "/" + dir;
}

// A key's value (from the file, --set, or the default).
Located value_of(const Values& given, const KeySpec& e, const std::string& origin) {
  auto it = given.find(e.name);
  if (it != given.end()) return it->second;
  return {YAML::Load(e.default_yaml), origin + " (default)"};
}

namespace {

// The resolved entries of data.test, each checked against test_keys().
YAML::Node resolve_tests(const KeySpec& e, const Located& v, const std::string& origin,
                         const std::string& base_dir) {
  YAML::Node out(YAML::NodeType::Sequence);
  std::vector<std::string> names;
  for (const auto& te : test_keys()) names.push_back(te.name);
  const auto& list = check_list(e, v.node, v.where, e.name);
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& item = list[i];
    const std::string item_key = e.name + "[" + std::to_string(i) + "]";
    const std::string iw = item_where(v, origin, item);
    if (!item.IsMap())
      error(iw, item_key, "expected a mapping {file, name, first, n_samples, batch_size}");
    for (const auto& kv : item) {
      const std::string k = key_name(kv.first, origin, item_key);
      if (std::find(names.begin(), names.end(), k) == names.end()) {
        const auto best = nearest(k, names);
        error(iw, item_key + "." + k,
              "unknown key (" + (best.empty() ? "" : "did you mean " + best + "? ") +
                  "expected file, name, first, n_samples, batch_size, split)");
      }
    }
    YAML::Node test;
    for (const auto& te : test_keys()) {
      const YAML::Node n = item[te.name] ? item[te.name] : YAML::Load(te.default_yaml);
      const std::string k = item_key + "." + te.name;
      if (te.kind == Kind::kInt) {
        test[te.name] = to_int(te, n, iw, k);
      } else {
        const auto text = to_string(te, n, iw, k);
        test[te.name] = te.path ? resolve_path(v, base_dir, text) : text;
      }
    }
    // Each key's own checks (a file is needed, ...).
    TestSetConfig scratch;
    for (const auto& te : test_keys()) {
      try {
        te.read(scratch, test[te.name]);
      } catch (const std::invalid_argument& x) {
        error(iw, item_key + "." + te.name, x.what());
      }
    }
    out.push_back(test);
  }
  return out;
}

// Whether a plain scalar `text` reads as a bool in YAML 1.1 (yaml-cpp quotes
// the null words itself).
bool reads_as_bool(const std::string& text) {
  static const std::set<std::string> kWords{
      "y",    "Y",    "yes",   "Yes",   "YES",   "n",  "N",  "no", "No",  "NO",  "true",
      "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"};
  return kWords.count(text) > 0;
}

}  // namespace

const char* const kStrTag = "tag:yaml.org,2002:str";

YAML::Node resolve_entry(const KeySpec& e, const Located& v, const std::string& origin,
                         const std::string& base_dir) {
  const std::string& key = e.name;
  YAML::Node out;
  const auto list = [&](const auto& convert) {
    out = YAML::Node(YAML::NodeType::Sequence);
    for (const auto& item : check_list(e, v.node, v.where, key)) {
      out.push_back(convert(e, item, item_where(v, origin, item), key));
    }
  };
  switch (e.kind) {
    case Kind::kInt:
      out = to_int(e, v.node, v.where, key);
      break;
    case Kind::kFloat:
      out = to_float(e, v.node, v.where, key);
      break;
    case Kind::kBool:
      out = to_bool(v.node, v.where, key);
      break;
    case Kind::kString:
      out = to_string(e, v.node, v.where, key);
      if (e.path) out = resolve_path(v, base_dir, out.as<std::string>());
      // YAML 1.1 readers (PyYAML) take a plain on/off/yes/no as a bool: such a
      // string is written quoted, "off".
      if (reads_as_bool(out.as<std::string>())) out.SetTag(kStrTag);
      break;
    case Kind::kIntList:
      list(to_int);
      break;
    case Kind::kFloatList:
      list(to_float);
      break;
    case Kind::kStringList:
      list([](const KeySpec& en, const YAML::Node& n, const std::string& w, const std::string& k) {
        return to_string(en, n, w, k);
      });
      break;
    case Kind::kTests:
      out = resolve_tests(e, v, origin, base_dir);
      break;
  }
  return out;
}

}  // namespace fno::config
