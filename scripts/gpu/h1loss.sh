#!/usr/bin/env bash
# h1loss: issue 28: the fused relative H1 loss: its GPU tests (and under memcheck and
#   racecheck), then fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16, with
#   FNO_FUSED_LOSS=0 and 1, twice; the seed main command both ways
# Run on the GPU machine from the repository root: scripts/gpu.sh h1loss (several suites
# in one call: scripts/gpu.sh h1loss OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" h1loss
# issue 28: the relative H1 loss by the fused kernels (cuda/h1_loss.cu) against the
# LibTorch path (FNO_FUSED_LOSS=0): their GPU tests, memcheck and racecheck on them,
# then fno_bench and the seed main command both ways
mkdir -p "$out/h1loss"
timeout 200 "$build/tests/fno_gpu_tests" -tc='*H1 loss*' > "$out/h1loss/gpu_tests.log" 2>&1
say "h1loss tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/h1loss/gpu_tests.log" | tr -s ' ' | tr '\n' ' '))"
local tool
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$build/tests/fno_gpu_tests" -tc='*H1 loss: the relative*' \
    > "$out/h1loss/$tool.log" 2>&1
  say "h1loss $tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/h1loss/$tool.log" | head -1)"
done
switch_ab FNO_FUSED_LOSS h1loss loss
