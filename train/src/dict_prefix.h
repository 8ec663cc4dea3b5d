// The entries of a tensor dict under `prefix`, the prefix dropped: a
// checkpoint's "model." weights, "optim." state, ... (checkpoints.cpp, predict.cpp).
#pragma once

#include <fno/serialize.h>

#include <string>

namespace fno::detail {

inline TensorDict with_prefix(const TensorDict& d, const std::string& prefix) {
  TensorDict out;
  for (const auto& item : d) {
    if (item.key().rfind(prefix, 0) == 0)
      out.insert(item.key().substr(prefix.size()), item.value());
  }
  return out;
}

}  // namespace fno::detail
