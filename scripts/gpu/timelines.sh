#!/usr/bin/env bash
# timelines: one step's memory timeline at 1024^2 for none, all, r+o, auto
# Run on the GPU machine from the repository root: scripts/gpu.sh timelines (several suites
# in one call: scripts/gpu.sh timelines OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" timelines
mkdir -p "$out/timelines"
"$bench" --resolutions 1024 --batches 8 --steps 2 --warmup 1 \
  --policies none,all,recompute+offload --chunks 4 --timeline-dir "$out/timelines" \
  > /dev/null 2> "$out/timelines.log"
"$bench" --resolutions 1024 --batches 8 --steps 2 --warmup 1 --policies auto \
  --gpu-memory-limit 8GiB --timeline-dir "$out/timelines" > /dev/null 2>> "$out/timelines.log"
ls "$out/timelines" | tee -a "$summary"
