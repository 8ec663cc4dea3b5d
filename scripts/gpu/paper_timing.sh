#!/usr/bin/env bash
# paper_timing: fno_bench on configs/darcy_paper_s{211,421}.yaml (batch 20, none)
# Run on the GPU machine from the repository root: scripts/gpu.sh paper_timing (several suites
# in one call: scripts/gpu.sh paper_timing OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" paper_timing
# issue 15: the step of the FNO paper's configs at s = 211 and 421 (batch 20)
for s in 211 421; do
  "$bench" --config configs/darcy_paper_s$s.yaml --resolutions $s --batches 20 --steps 5 \
    --warmup 2 --policies none --json "$out/paper_s$s.json" > /dev/null 2> "$out/paper_s$s.log"
  grep -h '^fno_bench\|^  ' "$out/paper_s$s.log" | cut -c1-200 | tee -a "$summary"
done
