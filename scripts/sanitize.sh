#!/usr/bin/env bash
# The sanitizer build: everything compiled by clang with AddressSanitizer and
# UndefinedBehaviorSanitizer, plus the libFuzzer targets (tests/fuzz). Runs the
# whole test suite under the sanitizers, each fuzz target included for
# FNO_FUZZ_SECONDS (default 20) on its seed corpus.
#   scripts/sanitize.sh               # build-san/, all tests
#   scripts/sanitize.sh -L fuzz       # extra arguments go to ctest
# Longer fuzzing: scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" > /dev/null   # packages and the Python with torch
build=${FNO_SAN_BUILD_DIR:-$root/build-san}
command -v clang++ > /dev/null || { echo "sanitize.sh: needs clang (apt-get install clang)" >&2; exit 1; }
py=${FNO_PYTHON:-$([ -x "$root/.venv/bin/python" ] && echo "$root/.venv/bin/python" || command -v python3)}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFNO_FUZZ=ON \
    -DFNO_FUZZ_SECONDS="${FNO_FUZZ_SECONDS:-20}" \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING
fi
cmake --build "$build"
# LibTorch is not instrumented and keeps allocations alive until exit: no leak check.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" --output-on-failure -j2 -E "python_roundtrip_load|install_find_package" "$@"
