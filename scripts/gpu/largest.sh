#!/usr/bin/env bash
# largest: the largest batch-8 grid auto trains under --cap 16GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh largest (several suites
# in one call: scripts/gpu.sh largest OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" largest
"$bench" --resolutions 512 --batches 8 --steps 1 --warmup 1 --policies auto --cap 16GiB \
  --find-largest --grid-step 128 --grid-max 4096 --json "$out/largest_auto_cap16.json" \
  > /dev/null 2> "$out/largest_auto_cap16.log"
grep -h 'largest\|^fno_bench' "$out/largest_auto_cap16.log" | cut -c1-200 | tee -a "$summary"
