// Experiment overrides read from the environment (docs/development.md lists
// them), for libfno and the layers above it.
#pragma once

#include <cstdlib>
#include <cstring>

namespace fno::detail {

/// Whether the switch `name` is on: unset, or set to anything but "0".
inline bool env_switch_on(const char* name) {
  const char* value = std::getenv(name);
  return !(value != nullptr && std::strcmp(value, "0") == 0);
}

}  // namespace fno::detail
