#!/usr/bin/env bash
# study: bench/resolution_study.sh (128^2 .. 2048^2: none, auto, auto 8 GiB)
# Run on the GPU machine from the repository root: scripts/gpu.sh study (several suites
# in one call: scripts/gpu.sh study OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" study
# issue 15: the resolution study (bench/resolution_study.sh's defaults)
FNO_BUILD_DIR=$build FNO_PYTHON=python3 bench/resolution_study.sh "$out/resolution_study" \
  > "$out/resolution_study.log" 2>&1
say "study: exit $?"
grep '^resolution_study' "$out/resolution_study.log" | cut -c1-220 | tee -a "$summary"
