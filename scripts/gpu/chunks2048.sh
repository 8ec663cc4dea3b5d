#!/usr/bin/env bash
# chunks2048: 2048^2: recompute vs recompute+offload in fp32 and bf16, auto under 8 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh chunks2048 (several suites
# in one call: scripts/gpu.sh chunks2048 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" chunks2048
# 2048^2, batch 8: recompute against recompute+offload in fp32 and bf16 (half the
# bytes on the link), and auto under 8 GiB (spatial chunks of the MLPs)
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 \
  --policies recompute,recompute+offload --chunks 8 --precision fp32,bf16 \
  --json "$out/bench2048_precision.json" > /dev/null 2> "$out/bench2048_precision.log"
"$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies auto \
  --gpu-memory-limit 8GiB --json "$out/bench2048_auto8.json" \
  > /dev/null 2> "$out/bench2048_auto8.log"
grep -h '^fno_bench\|auto: budget' "$out"/bench2048_precision.log "$out"/bench2048_auto8.log \
  | cut -c1-260 | tee -a "$summary"
