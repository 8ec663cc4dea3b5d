// The one JSON writer of libfno (summary.json, metrics.jsonl, telemetry.jsonl,
// fno_bench's results): flat objects of numbers, integers and strings, and
// string escaping for writers that stream their own layout. No JSON library
// is among the project's dependencies, and nothing here parses.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace fno::json {

/// `s` as the inside of a JSON string: quotes, backslashes and control characters escaped.
inline std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

/// A number with 10 significant digits; null when not finite (JSON has no NaN or infinity).
inline std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

/// {"key": value, ...} in insertion order.
class Object {
 public:
  Object& num(const std::string& k, double v) { return raw(k, number(v)); }
  Object& integer(const std::string& k, int64_t v) { return raw(k, std::to_string(v)); }
  Object& str(const std::string& k, const std::string& v) {
    return raw(k, "\"" + escape(v) + "\"");
  }
  /// `v` is already JSON (an object, an array, true/false/null).
  Object& raw(const std::string& k, const std::string& v) {
    body_ += (body_.empty() ? "" : ", ") + ("\"" + escape(k) + "\": ") + v;
    return *this;
  }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

/// The experiment overrides set in this process (fno/overrides.h) as a JSON
/// object, {"FNO_FUSED": "0", ...}; "" when none is set.
inline std::string overrides_json(const std::vector<std::pair<std::string, std::string>>& set) {
  if (set.empty()) return "";
  Object o;
  for (const auto& [name, value] : set) o.str(name, value);
  return o.text();
}

}  // namespace fno::json
