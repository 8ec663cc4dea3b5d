// The one error helper of the programs: every error ends as one line on
// stderr, "PROGRAM: first line of the message", and a non-zero exit code
// (each program's header comment lists its codes); no backtrace, no second line.
#pragma once

#include <cstdio>
#include <string>

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

}  // namespace fno::cli
