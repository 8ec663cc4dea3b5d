#!/usr/bin/env bash
# dftexpand: issue 28: fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16, with the DFT
#   expand kernel off (FNO_DFT_EXPAND=0) and on, twice; the seed main command both ways
# Run on the GPU machine from the repository root: scripts/gpu.sh dftexpand (several suites
# in one call: scripts/gpu.sh dftexpand OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" dftexpand
switch_ab FNO_DFT_EXPAND dftexpand expand
