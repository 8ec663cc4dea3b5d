#!/usr/bin/env bash
# tcprof: Nsight Compute on the fp32 3xTF32 backward (issue rate, stall reasons, SASS)
# Run on the GPU machine from the repository root: scripts/gpu.sh tcprof (several suites
# in one call: scripts/gpu.sh tcprof OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" tcprof
# issue 14: Nsight Compute on the fp32 3xTF32 tensor-core backward (the fp32 default's
# backward): issue rate, stall reasons, per-instruction stall samples (SASS)
local ncu_bin
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 150 "$ncu_bin" -k "regex:backward_tc" --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
  --section InstructionStats --section ComputeWorkloadAnalysis --section SourceCounters \
  "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
  --dtypes 3xtf32 --no-unfused --reps 3 > "$out/ncu_3xtf32_backward_tc.txt" 2>&1
say "ncu 3xtf32 backward_tc: exit $?"
timeout 150 "$ncu_bin" -k "regex:backward_tc" --launch-skip 3 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
  "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
  --dtypes 3xtf32 --no-unfused --reps 3 > "$out/ncu_3xtf32_backward_tc_sass.csv" 2>&1
say "ncu 3xtf32 backward_tc sass: exit $?"
gzip -f "$out/ncu_3xtf32_backward_tc_sass.csv"
grep -E 'Duration|Issue Slots Busy|Issued Ipc|Stall|Registers|Achieved Occupancy|Executed Instructions |DRAM Throughput|Warp Cycles Per Issued' \
  "$out/ncu_3xtf32_backward_tc.txt" | head -30 | tee -a "$summary"
