#!/usr/bin/env bash
# predictgraphs: issue 49's CUDA graphs of the forward (fno_predict --cuda-graphs, one GPU):
#   their GPU tests (graphed against eager in fp32 to 1e-6, replays of other inputs, a
#   rollout, micro-batches with a partial last one, auto's rule, bf16, fno_predict on against
#   off), then bench/predict_throughput.sh's 256^2 batch-256 rows and its 64^2 batch-64 rows
#   with --cuda-graphs off and on in the same call (fp32 and bf16, against neuraloperator)
# Run on the GPU machine from the repository root:
#   FNO_TARGETS="fno_gpu_tests fno_predict" scripts/gpu.sh predictgraphs
# scripts/gpu/lib.sh builds first and sets $out ($OUT/results), say, $build.
# Environment: PREDICT_STEPS ("2d small"), and bench/predict_throughput.sh's own (GRAPHS,
# ROUNDS, RES_S, B_S, BATCHES_S, ...).
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" predictgraphs
mkdir -p "$out/predictgraphs"
timeout 240 "$build/tests/fno_gpu_tests" -tc='GPU forward graphs*' \
  > "$out/predictgraphs/gpu_tests.log" 2>&1
say "forward graphs tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/predictgraphs/gpu_tests.log" | tr '\n' ' '))"
grep -B2 -A12 'ERROR\|FAILED' "$out/predictgraphs/gpu_tests.log" | head -60
grep -h -A1 'MESSAGE' "$out/predictgraphs/gpu_tests.log" | grep -v '^--\|MESSAGE' |
  cut -c1-200 | tee -a "$summary"
use_wheels
FNO_BUILD_DIR=$build FNO_PYTHON=python3 OUT="$out/predictgraphs" STEPS="${PREDICT_STEPS:-2d small}" \
  timeout 580 bench/predict_throughput.sh > "$out/predictgraphs/throughput.log" 2>&1
say "predict_throughput (STEPS ${PREDICT_STEPS:-2d small}, GRAPHS ${GRAPHS:-off on}): exit $?"
# Each fno_predict row: grid, precision, graphs mode, ms a batch, samples/s, the plan's end.
python3 - "$out/predictgraphs/predict_throughput.jsonl" << 'PY' | tee -a "$summary"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("row") == "throughput" and r.get("impl") == "fno_predict":
        print(f'  {r["name"]}: {r.get("grid")}^2 b{r.get("batch")} {r["precision"]} graphs '
              f'{r["cuda_graphs"]}: {r.get("ms_per_batch")} ms/batch, {r.get("samples_per_s")} '
              f'samples/s, exit {r["exit"]}; {r["plan"].split("; ", 1)[-1][:150]}')
    elif r.get("row") == "throughput":
        print(f'  {r["impl"]} {r.get("grid")}^2 b{r.get("batch")} {r["precision"]}: '
              f'{r.get("samples_per_s")} samples/s {r.get("error", "")}')
    elif r.get("row") == "ratio":
        print(f'  ratio {r["grid"]}^2 graphs {r["cuda_graphs"]} {r["ours"]}/{r["neuraloperator"]}:'
              f' {r["ratio"]}')
PY
