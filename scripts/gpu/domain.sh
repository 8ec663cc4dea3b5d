#!/usr/bin/env bash
# domain: issue 50 on 4 GPUs: bench/domain_parallel_study.sh: fno_bench
#   --domain-parallel on 1, 2 and 4 GPUs (DOMAIN_ROWS: strong8k weak strong16k 3d largest,
#   default all; about 8 minutes on 4 x H100): per-rank and total step times, speed-ups,
#   weak-scaling efficiency and the bytes each rank sends per step
# Run on the GPU machine from the repository root: scripts/gpu.sh domain. scripts/gpu/lib.sh
# builds first and sets $out ($OUT/results), say, $build and the shared helpers.
# On 2 GPUs, DOMAIN_ROWS=strong8k measures 8192^2 fp32 on 1 GPU and on 2 (the 4-GPU row
# is skipped); the 2-GPU row's search trial-steps the whole band with activations kept
# and the tiled plans, and its summary line names the plan taken.
# Environment: DOMAIN_ROWS, and bench/domain_parallel_study.sh's own (ROW_TIMEOUT, BUDGET_S)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" domain
local rows=()
read -r -a rows <<< "${DOMAIN_ROWS:-}"
FNO_BUILD_DIR=$build bench/domain_parallel_study.sh "$out/domain" "${rows[@]}" \
  > "$out/domain.log" 2>&1
say "domain: exit $?"
cat "$out/domain/summary.txt" 2> /dev/null | tee -a "$summary"
