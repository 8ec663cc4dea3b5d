#!/usr/bin/env bash
# neuralop: bench/neuralop_step.py at 1024^2, batch 8, plain and save_on_cpu (neuraloperator,
#   tensorly, tensorly-torch come as wheels in .whl/)
# Run on the GPU machine from the repository root: scripts/gpu.sh neuralop (several suites
# in one call: scripts/gpu.sh neuralop OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" neuralop
use_wheels
for flag in "" --save-on-cpu; do
  python3 bench/neuralop_step.py --resolution 1024 --batch 8 --steps "$steps" $flag \
    >> "$out/neuralop_step.jsonl" 2> "$out/neuralop_step${flag}.log"
done
tee -a "$summary" < "$out/neuralop_step.jsonl"
