#!/usr/bin/env bash
# ooc2048: issue 26's first row alone: 2048^2, b8, none and auto under 2 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh ooc2048 (several suites
# in one call: scripts/gpu.sh ooc2048 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ooc2048
# issue 26's first row alone (2048^2, b8: none, and auto under 2 GiB), for changes to
# the kernels the tiled step shares
ooc_row 2048_none --resolutions 2048 --batches 8 --policies none
ooc_row 2048_auto2 --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 2GiB
