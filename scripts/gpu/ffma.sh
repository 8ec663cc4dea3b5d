#!/usr/bin/env bash
# ffma: issue 14, the fp32 block tail (default: FFMA forward, 3xTF32 backward): the micro-
#   benchmark (every dtype), fno_bench none in fp32 (either), the GPU tests, memcheck of the
#   fused ones, the fp32 Darcy seed run on either; the benchmarks also from BASE_BUILD as k14
# Run on the GPU machine from the repository root: scripts/gpu.sh ffma (several suites
# in one call: scripts/gpu.sh ffma OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5), BASE_BUILD
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ffma
local base=${BASE_BUILD:-} micro=(--batch 8 --channels 32 --grid 1024 --no-unfused)
local dts=float,3xtf32,tf32,bf16,half
timeout 120 "$build/bench/fused_block_tail_bench" "${micro[@]}" --dtypes $dts \
  > "$out/micro_after.txt" 2>&1
say "micro-bench (this code): exit $?"
grep '^[a-z0-9]* *fused\|^dtype\|^device' "$out/micro_after.txt" | tee -a "$summary"
if [ -n "$base" ]; then
  for _ in $(seq 400); do [ -f "$base/.done" ] && break; sleep 1; done
  say "base build: exit $(cat "$base/.done" 2> /dev/null || echo missing)"
fi
if [ -x "$base/bench/fused_block_tail_bench" ]; then
  timeout 120 "$base/bench/fused_block_tail_bench" "${micro[@]}" --dtypes $dts \
    > "$out/micro_before.txt" 2>&1
  say "micro-bench (before): exit $?"
  grep '^[a-z0-9]* *fused' "$out/micro_before.txt" | tee -a "$summary"
  # and this code again, after the base: the spread between two runs
  timeout 120 "$build/bench/fused_block_tail_bench" "${micro[@]}" --dtypes $dts \
    > "$out/micro_after2.txt" 2>&1
  grep '^[a-z0-9]* *fused' "$out/micro_after2.txt" | sed 's/^/again: /' | tee -a "$summary"
fi
local b
for b in after before; do
  local exe=$bench
  [ "$b" = before ] && exe=$base/apps/fno_bench
  [ -x "$exe" ] || continue
  timeout 150 "$exe" "${common[@]}" --policies none --precision fp32 \
    --json "$out/none_$b.json" > /dev/null 2> "$out/none_$b.log"
  say "fno_bench none fp32 ($b): exit $?"
  grep -h '^fno_bench' "$out/none_$b.log" | cut -c1-200 | tee -a "$summary"
done
FNO_BLOCK_TAIL_FP32=3xtf32 timeout 150 "$bench" "${common[@]}" --policies none \
  --precision fp32 --json "$out/none_3xtf32.json" > /dev/null 2> "$out/none_3xtf32.log"
say "fno_bench none fp32 (3xTF32): exit $?"
grep -h '^fno_bench' "$out/none_3xtf32.log" | cut -c1-200 | tee -a "$summary"
gpu_tests_fused_errors
memcheck_fused
local m
for m in ffma 3xtf32; do
  FNO_BLOCK_TAIL_FP32=$m timeout 150 "$build/apps/fno_train" --config configs/darcy.yaml \
    --out "$out/seed_fp32_$m" --set output.progress=none > "$out/seed_fp32_$m.log" 2>&1
  say "seed fp32 $m: exit $? $(tail -1 "$out/seed_fp32_$m/metrics.jsonl" | cut -c1-300)"
  rm -f "$out/seed_fp32_$m"/*.pt
done
