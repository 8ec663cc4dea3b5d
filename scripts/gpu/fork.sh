#!/usr/bin/env bash
# fork: issue 28: fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16, with the GELU
#   fork off (FNO_GELU_FORK=0) and on, twice; the seed main command both ways
# Run on the GPU machine from the repository root: scripts/gpu.sh fork (several suites
# in one call: scripts/gpu.sh fork OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" fork
# issue 28: a block's GELU read by its spectral conv and its tail, their gradients
# added inside GELU's backward (one pass) or by autograd (FNO_GELU_FORK=0)
switch_ab FNO_GELU_FORK fork fork
