#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), builds everything, the fused CUDA
# kernels included even without a GPU (FNO_CUDA_KERNELS=ON: a compile error in
# them fails here, and so in CI), and runs the test suite.
# GPU tests are labelled "gpu" and report "skipped" on a machine without one.
#   scripts/test.sh                # all tests
#   scripts/test.sh -L gpu         # extra arguments go to ctest
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FNO_CUDA_KERNELS=${FNO_CUDA_KERNELS:-ON} FNO_BUILD_TARGETS= "$root/scripts/setup.sh"
build=${FNO_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j2 "$@"
