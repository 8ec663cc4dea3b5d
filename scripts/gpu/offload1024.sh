#!/usr/bin/env bash
# offload1024: fno_bench, seed FNO, batch 8, 1024^2: none, all/4, recompute/4,
#   recompute+offload/4, auto at 8, 4 and 2 GiB (median of 5 steps)
# Run on the GPU machine from the repository root: scripts/gpu.sh offload1024 (several suites
# in one call: scripts/gpu.sh offload1024 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" offload1024
"$bench" "${common[@]}" --policies none,all,recompute,recompute+offload --chunks 4 \
  --json "$out/bench1024_fixed.json" --csv "$out/bench1024_fixed.csv" \
  > /dev/null 2> "$out/bench1024_fixed.log"
for b in 8 4 2; do
  "$bench" "${common[@]}" --policies auto --gpu-memory-limit ${b}GiB \
    --json "$out/bench1024_auto${b}.json" --csv "$out/bench1024_auto${b}.csv" \
    > /dev/null 2> "$out/bench1024_auto${b}.log"
  echo "auto ${b}GiB exit $?" >> "$out/bench1024_auto${b}.log"
done
grep -h '^fno_bench:\|exit\|auto:' "$out"/bench1024_*.log | tee -a "$summary"
