#!/usr/bin/env bash
# ooccurve: auto's step time against the budget: 2048^2 b8 at 1, 4, 8, 16 GiB; 4096^2 b2 at 2,
#   8, 16 GiB (with ooc's rows: the out-of-core curve)
# Run on the GPU machine from the repository root: scripts/gpu.sh ooccurve (several suites
# in one call: scripts/gpu.sh ooccurve OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ooccurve
# issue 26's out-of-core curve: auto's step time against the GPU budget at 2048^2
# (b8) and 4096^2 (b2), with the none rows of this call (ooc's rows hold the
# 2 / 4 GiB points); notebooks/out_of_core.ipynb draws both
ooc_row 2048_none --resolutions 2048 --batches 8 --policies none
ooc_row 4096_none --resolutions 4096 --batches 2 --policies none
ooc_row 2048_auto1 --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 1GiB
for g in 4 8 16; do
  ooc_row 2048_auto$g --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit ${g}GiB
done
for g in 2 8 16; do
  ooc_row 4096_auto$g --resolutions 4096 --batches 2 --policies auto --gpu-memory-limit ${g}GiB
done
