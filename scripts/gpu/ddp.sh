#!/usr/bin/env bash
# ddp: two GPUs: tests/cli/test_distributed.sh with NCCL, fno_bench under torchrun (none, auto 8
#   GiB) with the scaling efficiency
# Run on the GPU machine from the repository root: scripts/gpu.sh ddp (several suites
# in one call: scripts/gpu.sh ddp OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ddp
# issue 16, on two GPUs (nvidia-h200-x2; NCCL_NVLS_ENABLE=0 as that machine sets it):
# the distributed CLI test with NCCL, then fno_bench under torchrun at 1024^2,
# batch 8 per GPU: none, and auto under 8 GiB per GPU (one GPU measured in the same run)
local torchrun
torchrun=$(command -v torchrun || echo "")
timeout 420 bash tests/cli/test_distributed.sh "$build/apps/fno_train" "$root" /tmp/ddp_cli cuda \
  "$torchrun" > "$out/ddp_cli.log" 2>&1
say "ddp cli (NCCL): exit $? ($(tail -1 "$out/ddp_cli.log"))"
cp /tmp/ddp_cli/faults.txt "$out/ddp_faults.txt" 2> /dev/null
cp /tmp/ddp_cli/two/metrics.jsonl "$out/ddp_two_metrics.jsonl" 2> /dev/null
cp /tmp/ddp_cli/one/metrics.jsonl "$out/ddp_one_metrics.jsonl" 2> /dev/null
grep FAIL "$out/ddp_cli.log" | cut -c1-400 | tee -a "$summary"
for run in "none" "auto --gpu-memory-limit 8GiB"; do
  local name=${run%% *}
  # shellcheck disable=SC2086
  timeout 300 "$torchrun" --no-python --nproc-per-node 2 "$bench" "${common[@]}" --policies $run \
    --json "$out/ddp_bench1024_$name.json" --csv "$out/ddp_bench1024_$name.csv" \
    > /dev/null 2> "$out/ddp_bench1024_$name.log"
  say "ddp bench $run: exit $? $(grep '^fno_bench: ' "$out/ddp_bench1024_$name.log" | cut -c1-200)"
done
