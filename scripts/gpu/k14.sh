#!/usr/bin/env bash
# k14: issue 14 in one call: the fused micro-benchmark (fp32 3xTF32 and FFMA, tf32, bf16, half),
#   fno_bench none (fp32, tf32, bf16; fp32 in 3xTF32), the fused GPU tests, memcheck of them;
#   the benchmarks also from BASE_BUILD (the code before, built alongside; the suite waits for
#   BASE_BUILD/.done) when it is set
# Run on the GPU machine from the repository root: scripts/gpu.sh k14 (several suites
# in one call: scripts/gpu.sh k14 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5), BASE_BUILD, K14_PROBE
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" k14
local base=${BASE_BUILD:-} micro=(--batch 8 --channels 32 --grid 1024 --no-unfused)
if [ -n "$base" ]; then
  for _ in $(seq 400); do [ -f "$base/.done" ] && break; sleep 1; done
  say "base build: exit $(cat "$base/.done" 2> /dev/null || echo missing)"
fi
timeout 150 "$build/bench/fused_block_tail_bench" "${micro[@]}" \
  --dtypes float,3xtf32,tf32,bf16,half --sweep > "$out/micro_after.txt" 2>&1
say "micro-bench (this code): exit $?"
grep -v '/l2:' "$out/micro_after.txt" | tee -a "$summary"
if [ -x "$base/bench/fused_block_tail_bench" ]; then
  timeout 120 "$base/bench/fused_block_tail_bench" "${micro[@]}" \
    --dtypes float,tf32,bf16,half > "$out/micro_before.txt" 2>&1
  say "micro-bench (before): exit $?"
  grep '^float\|^tf32\|^bf16\|^half' "$out/micro_before.txt" | tee -a "$summary"
fi
gpu_tests_fused_errors
local b
for b in after before after_3xtf32; do
  local exe=$bench env=() prec=fp32,tf32,bf16
  [ "$b" = before ] && exe=$base/apps/fno_bench
  [ "$b" = after_3xtf32 ] && env=(FNO_BLOCK_TAIL_FP32=3xtf32) && prec=fp32
  [ -x "$exe" ] || continue
  env "${env[@]}" timeout 150 "$exe" "${common[@]}" --policies none --precision $prec \
    --json "$out/none_$b.json" > /dev/null 2> "$out/none_$b.log"
  say "fno_bench none ($b): exit $?"
  grep -h '^fno_bench' "$out/none_$b.log" | cut -c1-200 | tee -a "$summary"
done
if [ -n "${K14_PROBE:-}" ] && [ -x "$build/bench/mlp_epilogue_bench" ]; then
  ldd "$build/bench/mlp_epilogue_bench" | grep -i cublas > "$out/mlp_epilogue_ldd.txt"
  md5sum "$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')"/../nvidia/cu13/lib/libcublasLt.so* \
    /usr/local/cuda/lib64/libcublasLt.so* >> "$out/mlp_epilogue_ldd.txt" 2>&1
  timeout 120 "$build/bench/mlp_epilogue_bench" --batch 8 --grid 1024 --dtypes float,bf16 \
    > "$out/mlp_epilogue_bench.txt" 2>&1
  say "mlp epilogue bench: exit $?"
  tee -a "$summary" < "$out/mlp_epilogue_bench.txt"
fi
memcheck_fused
# The Darcy seed run (20 epochs, same seed) in fp32: 3xTF32 block tail and FFMA (default)
local m
for m in 3xtf32 ffma; do
  FNO_BLOCK_TAIL_FP32=$m timeout 150 "$build/apps/fno_train" --config configs/darcy.yaml \
    --out "$out/seed_fp32_$m" --set output.progress=none > "$out/seed_fp32_$m.log" 2>&1
  say "seed fp32 $m: exit $? $(tail -1 "$out/seed_fp32_$m/metrics.jsonl" | cut -c1-300)"
done
