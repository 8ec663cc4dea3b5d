#!/usr/bin/env bash
# largestcurve: the largest grid auto trains at batch 1 under --cap 4GiB and 16GiB (--find-
#   largest)
# Run on the GPU machine from the repository root: scripts/gpu.sh largestcurve (several suites
# in one call: scripts/gpu.sh largestcurve OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" largestcurve
# the largest square grid auto trains at batch 1 under a 4 and a 16 GiB GPU (--cap caps
# the allocator; auto's budget is what it leaves): a binary search over multiples of
# 4096 up to 16384 (8192, 12288, 16384), fp32
for g in 4 16; do
  timeout 110 "$bench" --resolutions 1024 --batches 1 --steps 1 --warmup 1 --policies auto \
    --cap ${g}GiB --find-largest --grid-step 4096 --grid-max 16384 \
    --json "$out/ooc/largest_cap$g.json" --csv "$out/ooc/largest_cap$g.csv" > /dev/null \
    2> "$out/ooc/largest_cap$g.log"
  say "largest cap ${g} GiB: exit $?"
  grep -h '^fno_bench: ' "$out/ooc/largest_cap$g.log" | cut -c1-200 | tee -a "$summary"
done
