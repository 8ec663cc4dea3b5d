#!/usr/bin/env bash
# bar14: issue 14's bar: fno_bench none and auto 8 GiB (fp32, 1024^2, b8) against
#   bench/neuralop_step.py (needs .whl), the fused micro-benchmark (every dtype)
# Run on the GPU machine from the repository root: scripts/gpu.sh bar14 (several suites
# in one call: scripts/gpu.sh bar14 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" bar14
# issue 14's bar at 1024^2, batch 8, fp32, in one call: fno_bench none and auto under
# 8 GiB, neuraloperator's step (bench/neuralop_step.py), the fused micro-benchmark
"$bench" "${common[@]}" --policies none --precision fp32 --json "$out/bar_none.json" \
  > /dev/null 2> "$out/bar_none.log"
say "fno_bench none fp32: exit $?"
"$bench" "${common[@]}" --policies auto --gpu-memory-limit 8GiB --precision fp32 \
  --json "$out/bar_auto8.json" > /dev/null 2> "$out/bar_auto8.log"
say "fno_bench auto 8GiB fp32: exit $?"
grep -h '^fno_bench' "$out"/bar_*.log | cut -c1-200 | tee -a "$summary"
use_wheels
timeout 300 python3 bench/neuralop_step.py --resolution 1024 --batch 8 --steps "$steps" \
  >> "$out/neuralop_step.jsonl" 2> "$out/neuralop_step.log"
say "neuralop_step: exit $?"
tee -a "$summary" < "$out/neuralop_step.jsonl"
timeout 120 "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
  --no-unfused --dtypes float,3xtf32,tf32,bf16,half > "$out/bar_micro.txt" 2>&1
say "micro-bench: exit $?"
grep '^[a-z0-9]* *fused\|^dtype\|^device' "$out/bar_micro.txt" | tee -a "$summary"
