#!/usr/bin/env bash
# graphs: issue 28's CUDA graphs: their GPU tests; fno_bench none at 64^2/128^2/256^2, batch 32,
#   fp32 and bf16, with --cuda-graphs off and on; the seed main command with
#   training.cuda_graphs off and on (whole-process wall time, final metrics)
# Run on the GPU machine from the repository root: scripts/gpu.sh graphs (several suites
# in one call: scripts/gpu.sh graphs OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" graphs
mkdir -p "$out/graphs"
timeout 240 "$build/tests/fno_gpu_tests" -tc='GPU graphs*' > "$out/graphs/gpu_tests.log" 2>&1
say "graphs tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/graphs/gpu_tests.log" | tr '\n' ' '))"
grep -B2 -A12 'ERROR\|FAILED' "$out/graphs/gpu_tests.log" | head -60
grep -h -A1 'MESSAGE' "$out/graphs/gpu_tests.log" | grep -v '^--\|MESSAGE' | cut -c1-250 |
  tee -a "$summary"
for g in off on; do
  small_bench "$out/graphs" "bench_$g" --cuda-graphs $g
  say "bench --cuda-graphs $g: exit $?"
  grep -h '^fno_bench: ' "$out/graphs/bench_$g.log" | cut -c1-110 | tee -a "$summary"
done
for g in off on; do
  say "seed main command, cuda_graphs $g: $(seed_run "$out/graphs/seed_$g" \
    --set training.cuda_graphs=$g);" \
    "$(grep -o '"metrics": {[^}]*}' "$out/graphs/seed_$g/summary.json")"
  grep -o '"seconds": [0-9.e+-]*' "$out/graphs/seed_$g/metrics.jsonl" | awk '{print $2}' |
    tr '\n' ' ' | tee -a "$summary"
  echo | tee -a "$summary"
done
