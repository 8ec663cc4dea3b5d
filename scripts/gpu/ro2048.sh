#!/usr/bin/env bash
# ro2048: recompute/8 and recompute+offload/8 at 2048^2: learning window and fixed 1 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh ro2048 (several suites
# in one call: scripts/gpu.sh ro2048 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ro2048
# issue 12, bar 6: recompute+offload/8 against recompute/8 at 2048^2, batch 8,
# with the learning back-pressure window (auto, the default) and a fixed 1 GiB one
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 3 --policies recompute,recompute+offload \
  --chunks 8 --json "$out/ro2048_auto.json" --csv "$out/ro2048_auto.csv" \
  > /dev/null 2> "$out/ro2048.log"
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 3 --policies recompute+offload \
  --chunks 8 --max-inflight-mib 1024 --json "$out/ro2048_fixed1024.json" \
  > /dev/null 2>> "$out/ro2048.log"
grep -h '^fno_bench\|^  ' "$out/ro2048.log" | cut -c1-300 | tee -a "$summary"
