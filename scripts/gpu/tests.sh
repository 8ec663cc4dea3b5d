#!/usr/bin/env bash
# tests: build/tests/fno_gpu_tests (offload races, gradients, goldens)
# Run on the GPU machine from the repository root: scripts/gpu.sh tests (several suites
# in one call: scripts/gpu.sh tests OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" tests
timeout 300 "$build/tests/fno_gpu_tests" > "$out/gpu_tests.log" 2>&1
say "tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' "$out/gpu_tests.log" | tr '\n' ' '))"
grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests.log" | head -80
