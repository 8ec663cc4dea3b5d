// libFuzzer target: arbitrary text as a YAML config; only ConfigError may come back.
#include <fno_train/config.h>

#include <cstdint>
#include <string>

#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    fno::parse_config(text, "fuzz.yaml");
  } catch (const fno::ConfigError& e) {
    fno::fuzz::check_one_line(e.what());
  }
  return 0;
}
