#!/usr/bin/env bash
# inflight2048: recompute/8 and recompute+offload/8 at 2048^2 under three back-pressure windows
# Run on the GPU machine from the repository root: scripts/gpu.sh inflight2048 (several suites
# in one call: scripts/gpu.sh inflight2048 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" inflight2048
# recompute+offload's back-pressure window against its forward waits, at 2048^2
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies recompute --chunks 8 \
  --json "$out/inflight2048_recompute.json" > /dev/null 2> "$out/inflight2048.log"
for mib in 1024 4096 16384; do
  "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies recompute+offload \
    --chunks 8 --max-inflight-mib $mib --json "$out/inflight2048_ro_$mib.json" \
    > /dev/null 2>> "$out/inflight2048.log"
done
grep -h '^fno_bench' "$out/inflight2048.log" | cut -c1-260 | tee -a "$summary"
