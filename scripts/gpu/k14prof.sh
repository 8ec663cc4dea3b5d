#!/usr/bin/env bash
# k14prof: issue 14: the fused micro-benchmark with the launch-tuning sweep, the cuBLASLt
#   epilogue probe (where built), and Nsight Compute on the tensor-core kernels
# Run on the GPU machine from the repository root: scripts/gpu.sh k14prof (several suites
# in one call: scripts/gpu.sh k14prof OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" k14prof
# issue 14: the micro-benchmark with the launch-tuning sweep, the cuBLASLt
# epilogue probe, and Nsight Compute on the tensor-core kernels
timeout 200 "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
  --dtypes 3xtf32,tf32,bf16,half --no-unfused --sweep > "$out/micro_sweep.txt" 2>&1
say "micro-bench sweep: exit $?"
grep -v '/l2:' "$out/micro_sweep.txt" | tee -a "$summary"
if [ -x "$build/bench/mlp_epilogue_bench" ]; then
  timeout 150 "$build/bench/mlp_epilogue_bench" --batch 8 --grid 1024 --dtypes float,bf16 \
    > "$out/mlp_epilogue_bench.txt" 2>&1
  say "mlp epilogue bench: exit $?"
  grep -v 'no algorithm' "$out/mlp_epilogue_bench.txt" | tee -a "$summary"
fi
local ncu_bin dt k
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for dt in float bf16; do
  for k in backward_tc forward_tc; do
    [ "$dt/$k" = float/forward_tc ] && continue
    timeout 120 "$ncu_bin" -k "regex:$k" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
      --section InstructionStats \
      "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
      --dtypes "$dt" --no-unfused --reps 3 > "$out/ncu_${dt}_$k.txt" 2>&1
    say "ncu $dt $k: exit $?"
  done
done
