// How a key of the schema is declared (config_schema.cpp): its name, its field
// and its documentation, then its checks:
//
//   key("training.epochs", field(&RunConfig::training, &TrainingConfig::epochs),
//       "number of epochs").min(1).max(kMaxCount)
//
// The field's type gives the key's YAML type, and for an enum its words
// (to_string of values_of's list); the default-constructed config gives its
// default, so that a default is written once, in config.h (or in the options
// struct the field takes it from). A value with its own parser (an offload
// policy, a byte size) names it with .parsed(parse, text), whose
// std::invalid_argument message becomes the key's error.
#pragma once

#include "config_keys.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace fno::config {

/// The values of each choice, in the order the reference lists them; their
/// words are to_string's (config_names.cpp), so that a word is written once.
std::vector<OptimizerName> values_of(OptimizerName);
std::vector<SchedulerName> values_of(SchedulerName);
std::vector<LossName> values_of(LossName);
std::vector<Precision> values_of(Precision);
std::vector<dist::Backend> values_of(dist::Backend);
std::vector<Progress> values_of(Progress);
std::vector<DataProblem> values_of(DataProblem);
std::vector<NsMode> values_of(NsMode);
std::vector<DataFormat> values_of(DataFormat);
std::vector<DataStream> values_of(DataStream);
std::vector<data::NormalizerMode> values_of(data::NormalizerMode);
std::vector<LossSpace> values_of(LossSpace);
std::vector<PaddingMode> values_of(PaddingMode);
std::vector<SpectralInit> values_of(SpectralInit);
std::vector<CudaGraphs> values_of(CudaGraphs);
std::vector<data::Layout> values_of(data::Layout);

/// Whether T is a choice: an enum with a values_of list (else, such as
/// offload::Compress, a key reads it with .parsed).
template <typename T, typename = void>
struct IsChoice : std::false_type {};
template <typename T>
struct IsChoice<T, std::void_t<decltype(values_of(std::declval<T>()))>> : std::true_type {};
template <typename T>
constexpr bool kIsChoice = IsChoice<T>::value;

/// A field of Root as a value: read and written.
template <typename Root, typename T>
struct Access {
  std::function<T(const Root&)> get;
  std::function<void(Root&, T)> set;
};

/// A field of a section: field(&RunConfig::training, &TrainingConfig::epochs).
template <typename S, typename T>
Access<RunConfig, T> field(S RunConfig::*section, T S::*member) {
  return {[=](const RunConfig& c) { return (c.*section).*member; },
          [=](RunConfig& c, T v) { (c.*section).*member = std::move(v); }};
}

/// A field of a data.test entry.
template <typename T>
Access<TestSetConfig, T> entry(T TestSetConfig::*member) {
  return {[=](const TestSetConfig& t) { return t.*member; },
          [=](TestSetConfig& t, T v) { t.*member = std::move(v); }};
}

/// An option of the model (a TORCH_ARG of FNOOptions): arg(&FNOOptions::n_layers).
template <typename T>
Access<RunConfig, T> arg(T& (FNOOptions::*option)() noexcept) {
  return {[=](const RunConfig& c) {
            FNOOptions model = c.model;
            return (model.*option)();
          },
          [=](RunConfig& c, T v) { (c.model.*option)() = std::move(v); }};
}

/// A float as YAML text that YAML 1.1 readers (PyYAML) also take for a float:
/// the shortest that reads back, 1.0e-3 (a dot in the mantissa) below 0.01.
std::string float_text(double v);

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {
  using Item = T;
};

/// A type the key machinery reads and writes itself (else .parsed names how).
template <typename T>
constexpr bool direct() {
  if constexpr (IsVector<T>::value) {
    return direct<typename IsVector<T>::Item>();
  } else {
    return std::is_same_v<T, bool> || std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
           std::is_same_v<T, std::string> || IsChoice<T>::value || std::is_same_v<T, TestSetConfig>;
  }
}

template <typename T>
Kind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return Kind::kBool;
  if constexpr (std::is_same_v<T, int64_t>) return Kind::kInt;
  if constexpr (std::is_same_v<T, double>) return Kind::kFloat;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return Kind::kIntList;
  if constexpr (std::is_same_v<T, std::vector<double>>) return Kind::kFloatList;
  if constexpr (std::is_same_v<T, std::vector<TestSetConfig>>) return Kind::kTests;
  if constexpr (IsVector<T>::value) return Kind::kStringList;
  return Kind::kString;
}

/// A value as YAML text.
template <typename T>
std::string text_of(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return std::to_string(v);
  } else if constexpr (std::is_same_v<T, double>) {
    return float_text(v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.empty() ? "''" : v;
  } else if constexpr (kIsChoice<T>) {
    return to_string(v);
  } else if constexpr (std::is_same_v<T, TestSetConfig>) {
    throw std::logic_error("config: a data.test entry as a default");
  } else {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : ", ") + text_of(x);
    return "[" + out + "]";
  }
}

/// The entry of data.test that `n` (resolved) holds.
TestSetConfig read_test_entry(const YAML::Node& n);

/// A checked value of the resolved YAML as T.
template <typename T>
T from_node(const YAML::Node& n) {
  if constexpr (kIsChoice<T>) {
    const auto text = n.as<std::string>();
    for (const auto v : values_of(T{})) {
      if (to_string(v) == text) return v;
    }
    throw std::logic_error("config: '" + text + "' passed the schema but names no value");
  } else if constexpr (std::is_same_v<T, TestSetConfig>) {
    return read_test_entry(n);
  } else if constexpr (IsVector<T>::value) {
    T out;
    for (const auto& item : n) out.push_back(from_node<typename IsVector<T>::Item>(item));
    return out;
  } else {
    return n.as<T>();
  }
}

/// Values other than `d` to try as a key's sample, the likeliest first.
template <typename T>
std::vector<T> others(const T& d) {
  if constexpr (std::is_same_v<T, bool>) {
    return {!d};
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return {d + 1, d + 2, d - 1};
  } else if constexpr (std::is_same_v<T, double>) {
    return {d * 2, d / 2, 0.5, 1.0};
  } else if constexpr (std::is_same_v<T, std::string>) {
    return {"x"};
  } else if constexpr (kIsChoice<T>) {
    return values_of(T{});
  } else {
    using Item = typename IsVector<T>::Item;
    std::vector<T> out;
    if constexpr (kIsChoice<Item>) {
      for (const auto v : values_of(Item{})) out.push_back({v});
    }
    return out;  // lists of numbers: Builder::find_sample, item by item
  }
}

/// A key being declared; it converts to the Key<Root> of the table.
template <typename Root, typename T>
class Builder {
 public:
  Builder(std::string name, Access<Root, T> access, std::string doc) : access_(std::move(access)) {
    spec_.name = std::move(name);
    spec_.doc = std::move(doc);
    spec_.kind = kind_of<T>();
    if constexpr (kIsChoice<T>) {
      for (const auto v : values_of(T{})) spec_.choices.push_back(to_string(v));
    } else if constexpr (IsVector<T>::value) {
      if constexpr (kIsChoice<typename IsVector<T>::Item>) {
        for (const auto v : values_of(typename IsVector<T>::Item{})) {
          spec_.choices.push_back(to_string(v));
        }
      }
    }
  }
  /// The value (each item of a list) >= v; above: > v; max, below likewise.
  Builder& min(double v) { return bound(spec_.min, spec_.min_open, v, false); }
  Builder& above(double v) { return bound(spec_.min, spec_.min_open, v, true); }
  Builder& max(double v) { return bound(spec_.max, spec_.max_open, v, false); }
  Builder& below(double v) { return bound(spec_.max, spec_.max_open, v, true); }
  /// A list of lo to hi items.
  Builder& len(int lo, int hi) {
    spec_.min_len = lo;
    spec_.max_len = hi;
    return *this;
  }
  /// A data file, resolved against the config's folder.
  Builder& path() {
    spec_.path = true;
    return *this;
  }
  /// A check of the value alone beyond its range: throws std::invalid_argument
  /// with the message ("missing (the training data file)").
  Builder& check(std::function<void(const T&)> fn) {
    check_ = std::move(fn);
    return *this;
  }
  /// Written as a string and read by `parse` (its std::invalid_argument names
  /// the text); `text` writes a value back.
  Builder& parsed(std::function<T(const std::string&)> parse,
                  std::function<std::string(const T&)> text) {
    spec_.kind = Kind::kString;
    parse_ = std::move(parse);
    text_ = std::move(text);
    return *this;
  }
  /// A valid value other than the default, where no other is found by type
  /// (a parsed value, a word the check limits).
  Builder& sample(std::string yaml) {
    spec_.sample = std::move(yaml);
    return *this;
  }

  operator Key<Root>() const {  // NOLINT: the table converts each declaration
    Key<Root> key;
    static_cast<KeySpec&>(key) = spec_;
    const T d = access_.get(Root{});
    key.default_yaml = text(d);
    key.read = [access = access_, parse = parse_, check = check_](Root& root, const YAML::Node& n) {
      T v = value(parse, n);
      if (check) check(v);
      access.set(root, std::move(v));
    };
    if (key.sample.empty()) key.sample = find_sample(d);
    return key;
  }

 private:
  Builder& bound(double& at, bool& open, double v, bool is_open) {
    at = v;
    open = is_open;
    return *this;
  }
  static T value(const std::function<T(const std::string&)>& parse, const YAML::Node& n) {
    if (parse) return parse(n.as<std::string>());
    if constexpr (direct<T>()) {
      return from_node<T>(n);
    } else {
      throw std::logic_error("config: a key of this type needs .parsed()");
    }
  }
  std::string text(const T& v) const {
    if (text_) return text_(v);
    if constexpr (direct<T>()) {
      return text_of(v);
    } else {
      throw std::logic_error("config: a key of this type needs .parsed()");
    }
  }
  // Whether v is another value the key takes: in range, and past its check.
  bool takes(const T& v) const {
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (!spec_.in_range(static_cast<double>(v))) return false;
    } else if constexpr (IsVector<T>::value) {
      if constexpr (std::is_arithmetic_v<typename IsVector<T>::Item>) {
        for (const auto x : v) {
          if (!spec_.in_range(static_cast<double>(x))) return false;
        }
      }
      const auto n = static_cast<int>(v.size());
      if (n < spec_.min_len || n > spec_.max_len) return false;
    }
    try {
      if (check_) check_(v);
    } catch (const std::invalid_argument&) {
      return false;
    }
    return true;
  }
  std::string find_sample(const T& d) const {
    if constexpr (std::is_same_v<T, std::vector<TestSetConfig>>) {
      std::string entry;
      for (const auto& k : test_keys()) {
        entry += (entry.empty() ? "" : ", ") + k.name + ": " + k.sample;
      }
      return "[{" + entry + "}]";
    } else if constexpr (direct<T>()) {
      if (parse_) return "";
      std::vector<T> candidates = others(d);
      if constexpr (IsVector<T>::value) {
        using Item = typename IsVector<T>::Item;
        if constexpr (std::is_arithmetic_v<Item>) {
          // Each item replaced by its first other in range; an empty list gets one.
          T v = d.empty() ? T{Item{}} : d;
          for (auto& x : v) {
            for (const auto o : others(x)) {
              if (o != x && spec_.in_range(static_cast<double>(o))) {
                x = o;
                break;
              }
            }
          }
          candidates = {v};
        }
      }
      for (size_t i = 0; i < candidates.size(); ++i) {
        const T v = candidates[i];  // a copy: vector<bool> gives proxies
        if (!(v == d) && takes(v)) return text_of(v);
      }
    }
    return "";
  }

  KeySpec spec_;
  Access<Root, T> access_;
  std::function<void(const T&)> check_;
  std::function<T(const std::string&)> parse_;
  std::function<std::string(const T&)> text_;
};

/// Declares a key: key("training.epochs", field(...), "number of epochs").
template <typename Root, typename T>
Builder<Root, T> key(std::string name, Access<Root, T> access, std::string doc) {
  return Builder<Root, T>(std::move(name), std::move(access), std::move(doc));
}

}  // namespace fno::config
