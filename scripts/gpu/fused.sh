#!/usr/bin/env bash
# fused: the fused block tail's micro-benchmark; fno_bench none with FNO_FUSED=0 and 1
# Run on the GPU machine from the repository root: scripts/gpu.sh fused (several suites
# in one call: scripts/gpu.sh fused OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" fused
# issue 14: the fused block tail's micro-benchmark (GB/s and TFLOP/s against the
# device's peak, and the LibTorch path) and fno_bench none with the kernels off and on
timeout 120 "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
  --dtypes float,3xtf32,tf32,bf16,half > "$out/fused_micro_bench.txt" 2>&1
say "fused micro-bench: exit $?"
tee -a "$summary" < "$out/fused_micro_bench.txt"
for f in 0 1; do
  FNO_FUSED=$f "$bench" "${common[@]}" --policies none \
    --json "$out/bench1024_none_fused$f.json" > /dev/null 2> "$out/bench1024_none_fused$f.log"
  say "FNO_FUSED=$f: $(grep '^fno_bench' "$out/bench1024_none_fused$f.log" | cut -c1-120)"
done
