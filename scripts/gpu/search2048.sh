#!/usr/bin/env bash
# search2048: auto's plan search at 2048^2, batch 8: free memory, 16 GiB, 8 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh search2048 (several suites
# in one call: scripts/gpu.sh search2048 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" search2048
# issue 12: auto's plan search at 2048^2, batch 8, under the free memory, 16 and 8 GiB
for b in free 16GiB 8GiB; do
  local lim=()
  [ "$b" = free ] || lim=(--gpu-memory-limit "$b")
  "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies auto "${lim[@]}" \
    --json "$out/search2048_$b.json" > /dev/null 2> "$out/search2048_$b.log"
  echo "auto $b exit $?" >> "$out/search2048_$b.log"
done
grep -h '^fno_bench\|exit\|auto: budget' "$out"/search2048_*.log | cut -c1-330 | tee -a "$summary"
