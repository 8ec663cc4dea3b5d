#!/usr/bin/env bash
# study: bench/resolution_study.sh: fno_bench's step at 128^2 .. 8192^2 (batch 2) and training
#   runs at 128^2 .. 2048^2 (batch 8, 3 epochs), each with none, auto on the free memory, auto
#   under 8 GiB and under 2 GiB: peak GPU memory, step time, test error
#   (notebooks/resolutions.ipynb draws them); bounded to STUDY_SECONDS (420) of starts
# Run on the GPU machine from the repository root: scripts/gpu.sh study (several suites
# in one call: scripts/gpu.sh study OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: STUDY_SECONDS (420), STEP_TIMEOUT (150), and bench/resolution_study.sh's own
#   (STEP_RES, STEP_BATCH, SMALL_BUDGETS, EPOCHS, ...)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" study
# issue 15, extended by issue 48: the resolution study (bench/resolution_study.sh's defaults)
FNO_BUILD_DIR=$build FNO_PYTHON=python3 STUDY_SECONDS=${STUDY_SECONDS:-420} \
  STEP_TIMEOUT=${STEP_TIMEOUT:-150} bench/resolution_study.sh "$out/resolution_study" \
  > "$out/resolution_study.log" 2>&1
say "study: exit $?"
grep '^resolution_study' "$out/resolution_study.log" | cut -c1-220 | tee -a "$summary"
grep -A40 '^   res step' "$out/resolution_study.log" | grep -v '^wrote' | cut -c1-160 | tee -a "$summary"
