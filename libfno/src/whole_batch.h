// Internal: how the LibTorch channel layers (pointwise_autograd.cpp) bound their backward
// transients on long grids.
#pragma once

#include <cstdint>

namespace fno::detail {

/// On grids of 2^16 points or more, a layer whose [B, width, N] tensor would
/// take more than whole_batch_bytes() runs its backward, and a channel MLP its
/// hidden layer, one batch entry at a time (long entries in spatial chunks),
/// so that the transient is one entry's. Smaller ones run the whole batch at
/// once, in fewer and larger kernels.
constexpr int64_t kWholeBatchBytes = int64_t{256} << 20;
int64_t whole_batch_bytes();

/// Sets whole_batch_bytes() for the process while alive, and restores it
/// (tests: 0 runs every long grid per entry).
class WholeBatchBytesGuard {
 public:
  explicit WholeBatchBytesGuard(int64_t bytes);
  ~WholeBatchBytesGuard();
  WholeBatchBytesGuard(const WholeBatchBytesGuard&) = delete;
  WholeBatchBytesGuard& operator=(const WholeBatchBytesGuard&) = delete;

 private:
  int64_t previous_;
};

}  // namespace fno::detail
