#!/usr/bin/env bash
# tiledtests: the tiled step's GPU tests alone (tests/test_gpu_tiled.cpp: gradients, auto's
#   tiles, its host-memory refusal, the out-of-memory advice)
# Run on the GPU machine from the repository root: scripts/gpu.sh tiledtests (several suites
# in one call: scripts/gpu.sh tiledtests OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" tiledtests
timeout 400 "$build/tests/fno_gpu_tests" -sf='*test_gpu_tiled*' > "$out/gpu_tests_tiled.log" 2>&1
say "tiled tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/gpu_tests_tiled.log" | tr '\n' ' '))"
grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests_tiled.log" | head -60
grep -h 'auto under' "$out/gpu_tests_tiled.log" | cut -c1-300 | tee -a "$summary"
