#!/usr/bin/env bash
# moonshot: issue 26's moonshot: 16384^2, batch 1, bf16, auto on the whole GPU
# Run on the GPU machine from the repository root: scripts/gpu.sh moonshot (several suites
# in one call: scripts/gpu.sh moonshot OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" moonshot
# issue 26's moonshot: 16384^2, batch 1, bf16, auto on the whole GPU (then with bf16
# host storage)
for c in none bf16; do
  ooc_row moon_16384_bf16_c$c --resolutions 16384 --batches 1 --policies auto \
    --precision bf16 --compress $c
done
