#!/usr/bin/env bash
# ddpgraphs: several ranks under CUDA graphs: the two-graph step's GPU test (one GPU), then on
#   two GPUs the distributed CLI test with NCCL, the seed run on 2 ranks graphs off and on,
#   fno_bench 64^2/128^2 off and on (FNO_TARGETS with fno_gpu_tests)
# Run on the GPU machine from the repository root: scripts/gpu.sh ddpgraphs (several suites
# in one call: scripts/gpu.sh ddpgraphs OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ddpgraphs
# several ranks under CUDA graphs (two graphs a step, the NCCL all-reduce between them),
# on two GPUs: the distributed CLI test with NCCL (graphs auto: on; metrics against one
# process, a killed, a stopped and a SIGTERMed rank), the seed run on 2 ranks with
# training.cuda_graphs off and on (metrics, wall time), fno_bench under torchrun at
# 64^2 and 128^2, batch 32 per GPU, fp32, --cuda-graphs off and on
local torchrun g t1
torchrun=$(command -v torchrun || echo "")
mkdir -p "$out/ddpgraphs"
# first on one GPU: the two-graph step over a one-rank NCCL sync against no sync
timeout 120 "$build/tests/fno_gpu_tests" -tc="GPU graphs: a step over a gradient sync*" \
  > "$out/ddpgraphs/gpu_test.log" 2>&1
say "ddp graphs GPU test: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/ddpgraphs/gpu_test.log" | tr '\n' ' '))"
grep -h 'MESSAGE\|steps over' "$out/ddpgraphs/gpu_test.log" | cut -c1-200 | tee -a "$summary"
timeout 300 bash tests/cli/test_distributed.sh "$build/apps/fno_train" "$root" /tmp/ddp_cli cuda \
  "$torchrun" > "$out/ddpgraphs/cli.log" 2>&1
say "ddp cli (NCCL, graphs auto): exit $? ($(tail -1 "$out/ddpgraphs/cli.log"))"
grep FAIL "$out/ddpgraphs/cli.log" | cut -c1-400 | tee -a "$summary"
cp /tmp/ddp_cli/faults.txt "$out/ddpgraphs/faults.txt" 2> /dev/null
grep -h "CUDA graphs\|cuda_graphs" /tmp/ddp_cli/two.err | head -3 | tee -a "$summary"
for g in off on; do
  t1=$(date +%s%N)
  timeout 120 "$torchrun" --no-python --nproc-per-node 2 "$build/apps/fno_train" \
    --config configs/darcy.yaml --out "$out/ddpgraphs/seed_$g" --set data.batch_size=16 \
    --set training.cuda_graphs=$g --set output.progress=none > "$out/ddpgraphs/seed_$g.log" 2>&1
  say "2-rank seed run (batch 16 a rank), cuda_graphs $g: exit $? in" \
    "$((($(date +%s%N) - t1) / 1000000)) ms; $(grep -o '"metrics": {[^}]*}' "$out/ddpgraphs/seed_$g/summary.json")"
  grep -o '"seconds": [0-9.e+-]*' "$out/ddpgraphs/seed_$g/metrics.jsonl" | awk '{print $2}' |
    tr '\n' ' ' | tee -a "$summary"
  echo | tee -a "$summary"
done
for g in off on; do
  timeout 200 "$torchrun" --no-python --nproc-per-node 2 "$bench" --resolutions 64 128 \
    --batches 32 --policies none --precision fp32 --warmup 5 --steps 30 --cuda-graphs $g \
    --json "$out/ddpgraphs/bench_$g.json" --csv "$out/ddpgraphs/bench_$g.csv" \
    > /dev/null 2> "$out/ddpgraphs/bench_$g.log"
  say "ddp bench --cuda-graphs $g: exit $?"
  grep -h '^fno_bench: \|one GPU\|ranks' "$out/ddpgraphs/bench_$g.log" | cut -c1-220 | tee -a "$summary"
done
