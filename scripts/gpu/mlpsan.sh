#!/usr/bin/env bash
# mlpsan: memcheck and racecheck on the channel-MLP GPU test's small grids (MLPSAN_SUBCASE,
#   MLPSAN_TOOLS: see mlp_sanitizers)
# Run on the GPU machine from the repository root: scripts/gpu.sh mlpsan (several suites
# in one call: scripts/gpu.sh mlpsan OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" mlpsan
mkdir -p "$out/mlpsan"
mlp_sanitizers "$out/mlpsan"
