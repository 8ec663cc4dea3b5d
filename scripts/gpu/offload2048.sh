#!/usr/bin/env bash
# offload2048: 2048^2, batch 8: recompute/8, recompute+offload/8, auto 16 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh offload2048 (several suites
# in one call: scripts/gpu.sh offload2048 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" offload2048
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 \
  --policies recompute,recompute+offload --chunks 8 \
  --json "$out/bench2048_fixed.json" --csv "$out/bench2048_fixed.csv" \
  > /dev/null 2> "$out/bench2048_fixed.log"
local t=$(date +%s%N)
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies auto \
  --gpu-memory-limit 16GiB --json "$out/bench2048_auto16.json" \
  > /dev/null 2> "$out/bench2048_auto16.log"
echo "auto 16GiB exit $?, wall $((($(date +%s%N) - t) / 1000000)) ms" >> "$out/bench2048_auto16.log"
grep -h '^fno_bench:\|exit\|auto:.*search' "$out"/bench2048_*.log | tee -a "$summary"
