#!/usr/bin/env bash
# mlp: the fused channel MLP's GPU tests; fno_bench with and without it (FNO_FUSED_MLP) at
#   1024^2 (none, fp32/bf16) and 2048^2 (none, auto under 2 GiB), batch 8
# Run on the GPU machine from the repository root: scripts/gpu.sh mlp (several suites
# in one call: scripts/gpu.sh mlp OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" mlp
# the fused channel MLP (lifting, projection): its GPU tests, then fno_bench with it
# (FNO_FUSED_MLP=1) and without (0) in this call: none at 1024^2 b8 (fp32, bf16),
# none and auto under 2 GiB at 2048^2 b8
timeout 300 "$build/tests/fno_gpu_tests" -tc='*channel MLP*' > "$out/gpu_tests_mlp.log" 2>&1
say "mlp tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/gpu_tests_mlp.log" | tr '\n' ' '))"
grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests_mlp.log" | head -60
for m in 0 1; do
  export FNO_FUSED_MLP=$m
  ooc_row mlp${m}_1024_none --resolutions 1024 --batches 8 --policies none \
    --precision fp32,bf16
  ooc_row mlp${m}_2048_none --resolutions 2048 --batches 8 --policies none
  ooc_row mlp${m}_2048_auto2 --resolutions 2048 --batches 8 --policies auto \
    --gpu-memory-limit 2GiB
done
unset FNO_FUSED_MLP
