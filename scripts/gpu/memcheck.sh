#!/usr/bin/env bash
# memcheck: the same under compute-sanitizer --tool memcheck
# Run on the GPU machine from the repository root: scripts/gpu.sh memcheck (several suites
# in one call: scripts/gpu.sh memcheck OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" memcheck
# (all but the 2^31-element fused test, which memcheck would take minutes over)
timeout 480 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$build/tests/fno_gpu_tests" -tce="*64-bit offsets*" > "$out/memcheck.log" 2>&1
say "memcheck: exit $? ($(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1))"
