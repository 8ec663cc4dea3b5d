#!/usr/bin/env bash
# prof: traced steps with their host calls and idle gaps: 128^2 b32 fp32/bf16, 2048^2 b8 auto
#   under 2 GiB (bench/trace_kernels.py --gaps)
# Run on the GPU machine from the repository root: scripts/gpu.sh prof (several suites
# in one call: scripts/gpu.sh prof OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" prof
# one traced step (Kineto; CUDA graphs off) summed by kernel, with the host's CUDA
# calls and the longest GPU idle gaps (bench/trace_kernels.py --gaps): issue 28's
# 128^2 rows (batch 32, fp32 and bf16) and issue 26's 2048^2 row (batch 8, auto
# under 2 GiB: eight one-sample tiled micro-batches)
mkdir -p "$out/prof"
for p in fp32 bf16; do
  timeout 200 "$bench" --resolutions 128 --batches 32 --policies none --precision $p \
    --cuda-graphs off --warmup 5 --steps 10 --trace "$out/prof/p128_$p.json" \
    > /dev/null 2> "$out/prof/p128_$p.log"
  say "== 128^2 b32 $p: exit $? $(grep '^fno_bench: ' "$out/prof/p128_$p.log" | cut -c1-120)"
  python3 bench/trace_kernels.py "$out/prof/p128_$p.json" --top 25 --gaps 5 --ops | tee -a "$summary"
  rm -f "$out/prof/p128_$p.json"
done
timeout 400 "$bench" --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 2GiB \
  --warmup 1 --steps 5 --trace "$out/prof/p2048.json" > /dev/null 2> "$out/prof/p2048.log"
say "== 2048^2 b8 auto 2 GiB: exit $? $(grep '^fno_bench: ' "$out/prof/p2048.log" | cut -c1-200)"
python3 bench/trace_kernels.py "$out/prof/p2048.json" --top 30 --gaps 8 --ops | tee -a "$summary"
rm -f "$out/prof/p2048.json"
