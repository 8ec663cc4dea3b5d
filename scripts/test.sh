#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), builds, and runs the test suite.
# GPU tests are labelled "gpu" and report "skipped" on a machine without one.
#   scripts/test.sh                # all tests
#   scripts/test.sh -L gpu         # extra arguments go to ctest
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build=${FNO_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j2 "$@"
