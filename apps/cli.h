// What the programs share about their command line: the one error helper
// (every error ends as one line on stderr, "PROGRAM: first line of the
// message", and a non-zero exit code; each program's header comment lists its
// codes; no backtrace, no second line), readable integer checks for CLI11
// options, and the final check that stdout was written.
#pragma once

#include <CLI/CLI.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

namespace fno::cli {

class Fail {
 public:
  explicit Fail(const char* program) : program_(program) {}
  /// Prints the message's first line, prefixed with the program; returns `code` for main.
  int operator()(int code, const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n", program_, message.substr(0, message.find('\n')).c_str());
    return code;
  }

 private:
  const char* program_;
};

/// The exit code to return once the program's output is out: `code`, or 3
/// with one line when a write to stdout failed (a full disk, a closed file),
/// so that a lost result is never an exit 0.
inline int flushed(const Fail& fail, int code = 0) {
  std::cout.flush();
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (flush_failed) return fail(3, std::string("stdout: write failed: ") + std::strerror(err));
  // (a write that failed earlier, its buffer gone: the reason is gone too)
  if (std::ferror(stdout) || !std::cout) return fail(3, "stdout: write failed");
  return code;
}

/// Why `path` cannot be written (a new file, or one replaced), or "" when it
/// can: its folder must be a writable directory, the path no directory. For
/// outputs written after the work, so that they fail before it.
inline std::string unwritable_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "'" + path + "' is a directory";
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return "'" + dir + "' is not a directory";
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return "cannot write in '" + dir + "': " + std::strerror(errno);
  }
  return "";
}

/// Why files cannot be written into the directory `dir`, or "" when they can.
inline std::string unwritable_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return "'" + dir + "' is not a directory";
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return "cannot write in '" + dir + "': " + std::strerror(errno);
  }
  return "";
}

namespace detail {

/// "2^63 - 1" for the largest values of the usual types, else the number.
template <typename T>
std::string bound_text(T v) {
  if (v == std::numeric_limits<T>::max() && sizeof(T) == 8) {
    return std::is_signed_v<T> ? "2^63 - 1" : "2^64 - 1";
  }
  return std::to_string(v);
}

}  // namespace detail

/// What an integer in [lo, hi] is, in a few words: "a positive integer",
/// "a non-negative integer", "an integer >= 3", "an integer between 1 and 65536".
template <typename T>
std::string integer_text(T lo, T hi) {
  const bool unbounded = hi == std::numeric_limits<T>::max();
  if (unbounded && lo == 1) return "a positive integer";
  if (unbounded && lo == 0) return "a non-negative integer";
  if (unbounded) return "an integer >= " + std::to_string(lo);
  return "an integer between " + std::to_string(lo) + " and " + detail::bound_text(hi);
}

/// A CLI11 transform for an integer option of type T that must lie in
/// [lo, hi]: plain decimal digits (a leading '-' only for signed T), leading
/// zeros dropped. It refuses with "must be <integer_text>, got 'TEXT'" (CLI11
/// prefixes the option's name). CLI11's own conversion (strtoull/strtoll with
/// base 0) would read "010" as octal 8, "0x10" as 16, wrap "-1" to 2^64 - 1
/// for an unsigned option and saturate out-of-range values; its Range says
/// "not in range 0.000000 to 1797693..." (309 digits).
template <typename T>
CLI::Validator integer_in(T lo, T hi) {
  static_assert(std::is_integral_v<T>);
  const std::string what = integer_text(lo, hi);
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        const auto refused = [&](const std::string& why) {
          return "must be " + what + why + ", got '" + text + "'";
        };
        const bool negative = std::is_signed_v<T> && !text.empty() && text[0] == '-';
        std::string digits = negative ? text.substr(1) : text;
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
          return refused("");
        }
        digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
        const std::string normal = negative ? "-" + digits : digits;
        T value{};
        const auto [end, ec] = std::from_chars(normal.data(), normal.data() + normal.size(), value);
        if (ec == std::errc::result_out_of_range) {
          return refused(" (at most " + detail::bound_text(hi) + ")");
        }
        if (ec != std::errc() || end != normal.data() + normal.size()) return refused("");
        if (value < lo || value > hi) return refused("");
        text = normal;
        return std::string();
      },
      what);
}

/// integer_in for the common ranges.
template <typename T>
CLI::Validator positive_integer() {
  return integer_in<T>(1, std::numeric_limits<T>::max());
}
template <typename T>
CLI::Validator non_negative_integer() {
  return integer_in<T>(0, std::numeric_limits<T>::max());
}

/// A CLI11 check for a finite number above 0 (`strict`) or at least 0: it
/// refuses with "must be a positive number, got 'TEXT'" (or "a non-negative
/// number"), where CLI11's PositiveNumber says "not in range 0.000000 to
/// 1797693..." (309 digits).
inline CLI::Validator number_from_zero(bool strict) {
  const std::string what = strict ? "a positive number" : "a non-negative number";
  return CLI::Validator(
      [strict, what](std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        const bool parsed = !text.empty() && end == begin + text.size() && std::isfinite(v);
        if (!parsed || v < 0 || (strict && v == 0))
          return "must be " + what + ", got '" + text + "'";
        return std::string();
      },
      what);
}
inline CLI::Validator positive_number() { return number_from_zero(true); }
inline CLI::Validator non_negative_number() { return number_from_zero(false); }

}  // namespace fno::cli
