#!/usr/bin/env bash
# tiledprof: one traced step of the whole-grid and tiled steps at 2048^2 and 4096^2, summed by
#   kernel (bench/trace_kernels.py)
# Run on the GPU machine from the repository root: scripts/gpu.sh tiledprof (several suites
# in one call: scripts/gpu.sh tiledprof OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" tiledprof
# one traced step per plan (Kineto), summed by kernel (bench/trace_kernels.py)
local tb=$build/bench/tiled_step_bench
for args in "--grid 2048 --plans whole,512:r/d/d/d:d" "--grid 4096 --plans whole,512:r/h/h/h:d"; do
  local tag=prof$(echo "$args" | cut -d' ' -f2)
  # shellcheck disable=SC2086
  timeout 200 "$tb" $args --steps 2 --trace "$out/$tag" 2>&1 | tee -a "$summary"
  for f in "$out/$tag".*.json; do
    say "== $f"
    python3 bench/trace_kernels.py "$f" --top 30 | tee -a "$summary"
    rm -f "$f"  # (tens of MiB: the packed results must stay under 16 MiB)
  done
done
