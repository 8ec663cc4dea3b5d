#!/usr/bin/env bash
# ooc: issue 26's rows: fno_bench none and auto under small budgets at 2048^2 (b8), 4096^2 (b2
#   fp32/bf16, b8), 8192^2 (b1)
# Run on the GPU machine from the repository root: scripts/gpu.sh ooc (several suites
# in one call: scripts/gpu.sh ooc OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ooc
# issue 26's rows, each ratio within this call: fno_bench none and auto under
# small budgets (fp32 unless named)
ooc_row 2048_none --resolutions 2048 --batches 8 --policies none
ooc_row 2048_auto2 --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 2GiB
ooc_row 4096_none --resolutions 4096 --batches 2 --policies none --precision fp32,bf16
ooc_row 4096_auto4 --resolutions 4096 --batches 2 --policies auto --gpu-memory-limit 4GiB
ooc_row 4096_auto4_bf16 --resolutions 4096 --batches 2 --policies auto \
  --gpu-memory-limit 4GiB --precision bf16
ooc_row 4096b8_auto16 --resolutions 4096 --batches 8 --policies auto --gpu-memory-limit 16GiB
ooc_row 8192_auto16 --resolutions 8192 --batches 1 --policies auto --gpu-memory-limit 16GiB
