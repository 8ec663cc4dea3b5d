#!/usr/bin/env bash
# seednoise: the fp32 Darcy seed run on every fp32 block-tail mode and the LibTorch path
# Run on the GPU machine from the repository root: scripts/gpu.sh seednoise (several suites
# in one call: scripts/gpu.sh seednoise OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" seednoise
# issue 14: the fp32 Darcy seed run (20 epochs) on each fp32 block-tail mode and on the
# LibTorch path (FNO_FUSED=0), side by side
local v name
local -a runs=("ffma" "3xtf32" "unfused FNO_FUSED=0")
for v in "${runs[@]}"; do
  local words=($v)
  name=$(echo "$v" | tr ' =' '__')
  (env FNO_BLOCK_TAIL_FP32=${words[0]} "${words[@]:1}" timeout 200 "$build/apps/fno_train" \
    --config configs/darcy.yaml --out "$out/seednoise_$name" --set output.progress=none \
    --set training.checkpoint_every=1000 --set data.n_predictions=0 \
    > "$out/seednoise_$name.log" 2>&1; echo $? > "$out/seednoise_$name.rc") &
done
wait
for v in "${runs[@]}"; do
  name=$(echo "$v" | tr ' =' '__')
  rm -f "$out/seednoise_$name"/*.pt
  say "seed $v: exit $(cat "$out/seednoise_$name.rc") $(tail -1 "$out/seednoise_$name/metrics.jsonl" | cut -c1-300)"
done
