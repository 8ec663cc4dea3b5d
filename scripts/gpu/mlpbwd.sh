#!/usr/bin/env bash
# mlpbwd: issue 28: fno_bench none at 64^2/128^2/256^2 with the session's start's channel-MLP
#   backward and first-dim transform (FNO_FUSED_MLP_BACKWARD=0, FNO_DFT_FIRST_DIM=0), then each
#   change on; memcheck and racecheck on the channel-MLP GPU test
# Run on the GPU machine from the repository root: scripts/gpu.sh mlpbwd (several suites
# in one call: scripts/gpu.sh mlpbwd OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" mlpbwd
# issue 28, in one call, fno_bench none at 64^2, 128^2, 256^2: the session's start
# (the channel MLPs' backward through GELU(h)/dh tensors and weight-gradient GEMMs,
# FNO_FUSED_MLP_BACKWARD=0; the first dim's modes by cuFFT, FNO_DFT_FIRST_DIM=0),
# then the one-pass backward, then both; then memcheck and racecheck on the
# channel-MLP GPU test's small grids
mkdir -p "$out/mlpbwd"
local v
for v in 0,0 1,0 1,1; do
  (export FNO_FUSED_MLP_BACKWARD=${v%,*} FNO_DFT_FIRST_DIM=${v#*,} &&
    small_bench "$out/mlpbwd" "mlp${v%,*}_dft${v#*,}")
  say "FNO_FUSED_MLP_BACKWARD=${v%,*} FNO_DFT_FIRST_DIM=${v#*,}: exit $?"
  grep -h '^fno_bench: ' "$out/mlpbwd/mlp${v%,*}_dft${v#*,}.log" | cut -c1-120 |
    tee -a "$summary"
done
mlp_sanitizers "$out/mlpbwd"
