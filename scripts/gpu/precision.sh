#!/usr/bin/env bash
# precision: fno_bench in fp32/tf32/bf16/fp16 at 1024^2, bf16 auto 4 GiB, neuraloperator's
#   precision rows, the Darcy seed run in fp32/bf16/fp16
# Run on the GPU machine from the repository root: scripts/gpu.sh precision (several suites
# in one call: scripts/gpu.sh precision OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" precision
# issue 13: every precision (seed FNO, batch 8, 1024^2, none), bf16 under
# auto at 4 GiB, neuraloperator's precision rows, the Darcy seed run in
# fp32, bf16 and fp16 (20 epochs, same seed)
"$bench" "${common[@]}" --policies none --precision fp32,tf32,bf16,fp16 \
  --json "$out/precision1024.json" --csv "$out/precision1024.csv" \
  > /dev/null 2> "$out/precision1024.log"
"$bench" "${common[@]}" --policies auto --gpu-memory-limit 4GiB --precision bf16,fp32 \
  --json "$out/precision1024_auto4.json" --csv "$out/precision1024_auto4.csv" \
  > /dev/null 2> "$out/precision1024_auto4.log"
grep -h '^fno_bench' "$out"/precision1024*.log | cut -c1-240 | tee -a "$summary"
use_wheels
for args in "--precision fp32" "--precision tf32" "--precision fp16" \
  "--precision fp16 --block-precision mixed" "--precision bf16"; do
  python3 bench/neuralop_step.py --resolution 1024 --batch 8 --steps "$steps" $args \
    >> "$out/neuralop_precision.jsonl" 2>> "$out/neuralop_precision.log"
done
tee -a "$summary" < "$out/neuralop_precision.jsonl"
# (tf32 too: how far a perturbation of rounding size moves the 20-epoch metrics)
for p in fp32 tf32 bf16 fp16; do
  "$build/apps/fno_train" --config configs/darcy.yaml --precision $p --out "$out/seed_$p" \
    --set output.progress=none > "$out/seed_$p.log" 2>&1
  say "seed $p: exit $? $(tail -1 "$out/seed_$p/metrics.jsonl" | cut -c1-300)"
done
