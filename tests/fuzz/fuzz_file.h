// Helpers shared by the fuzz targets.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fno::fuzz {

/// Writes the input to a per-process scratch file and returns its path.
inline std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/fno_fuzz_" + std::to_string(::getpid()) + suffix;
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

/// Errors must be one line: a multi-line message (a stack dump) is a finding.
inline void check_one_line(const char* what) {
  if (std::string(what).find('\n') != std::string::npos) {
    std::fprintf(stderr, "multi-line error message:\n%s\n", what);
    std::abort();
  }
}

}  // namespace fno::fuzz
