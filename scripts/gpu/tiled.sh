#!/usr/bin/env bash
# tiled: the tiled step's GPU tests; bench/tiled_step_bench against the whole-grid step at
#   2048^2 and 4096^2 (fp32, bf16, bf16 host storage)
# Run on the GPU machine from the repository root: scripts/gpu.sh tiled (several suites
# in one call: scripts/gpu.sh tiled OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" tiled
# the tiled step (fno/tiled.h): its GPU tests, then bench/tiled_step_bench
# against the whole-grid step at 2048^2 and 4096^2 (fp32, bf16)
timeout 400 "$build/tests/fno_gpu_tests" -sf='*test_gpu_tiled*' > "$out/gpu_tests_tiled.log" 2>&1
say "tiled tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/gpu_tests_tiled.log" | tr '\n' ' '))"
grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests_tiled.log" | head -60
grep -h 'MESSAGE' -A1 "$out/gpu_tests_tiled.log" | grep -v '^--' | cut -c1-300 | tee -a "$summary"
local tb=$build/bench/tiled_step_bench
for args in "--grid 2048 --plans whole,256:r/d/d/d:d,512:r/d/d/d:d,1024:r/d/d/d:d,512:r/h/h/h:d,512:r/h/h/h:h,512:r/r/h/r:d" \
            "--grid 4096 --plans whole,512:r/h/h/h:d,1024:r/h/h/h:d,512:r/r/h/r:d,512:r/h/h/h:h" \
            "--grid 4096 --precision bf16 --plans whole,512:r/h/h/h:d,1024:r/h/h/h:d,512:r/h/h/h:h" \
            "--grid 4096 --compress bf16 --plans 512:r/h/h/h:d,512:r/h/h/h:h"; do
  # shellcheck disable=SC2086
  timeout 200 "$tb" $args --steps 3 > "$out/tiled_bench.tmp" 2>&1
  echo "tiled_step_bench $args: exit $?" | tee -a "$summary"
  tee -a "$summary" < "$out/tiled_bench.tmp"
  cat "$out/tiled_bench.tmp" >> "$out/tiled_bench.txt"
done
