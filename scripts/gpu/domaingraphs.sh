#!/usr/bin/env bash
# domaingraphs: issue 50: a step split across ranks taken as CUDA graphs. fno_train with
#   distributed.domain_parallel=2 on two GPUs, training.cuda_graphs off and auto, on the seed
#   config (16^2, launch-bound) and on Darcy at 257^2 made by fno_datagen (64 training and 32
#   test samples, batch 8): each epoch's seconds and the final metrics, off against auto
#   (FNO_TARGETS with fno_train and fno_datagen; DG_SEED_ONLY=1: the seed config alone)
# Run on the GPU machine from the repository root: scripts/gpu.sh domaingraphs (several suites
# in one call: scripts/gpu.sh domaingraphs OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $build and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" domaingraphs
local torchrun g name t1 d=/tmp/domaingraphs
torchrun=$(command -v torchrun || echo "")
mkdir -p "$out/domaingraphs" "$d"
[ -n "${DG_SEED_ONLY:-}" ] || timeout 120 "$build/apps/fno_datagen" --problem darcy --resolution 257 --samples 96 \
  --test-samples 32 --seed 7 --out "$d/darcy257.h5" > "$out/domaingraphs/datagen.log" 2>&1
say "domaingraphs: fno_datagen 257^2: exit $?"
cat > "$d/darcy257.yaml" << YAML
model: {n_modes: [16, 16], hidden_channels: 32, projection_channel_ratio: 2}
data:
  train_file: $d/darcy257_train.h5
  n_train: 64
  batch_size: 8
  test: [{file: $d/darcy257_test.h5, n_samples: 32, batch_size: 8}]
  encode_output: true
optimizer: {lr: 8.0e-3, weight_decay: 1.0e-4}
training: {epochs: 6, loss: h1, eval_losses: [h1, l2]}
YAML
local configs=(configs/darcy.yaml "$d/darcy257.yaml")
[ -n "${DG_SEED_ONLY:-}" ] && configs=(configs/darcy.yaml)
for cfg in "${configs[@]}"; do
  for g in off auto; do
    name=$(basename "$cfg" .yaml)_$g
    t1=$(date +%s%N)
    timeout 200 "$torchrun" --no-python --nproc-per-node 2 "$build/apps/fno_train" \
      --config "$cfg" --out "$out/domaingraphs/$name" --set distributed.domain_parallel=2 \
      --set training.cuda_graphs=$g --set output.progress=none --set offload.plan_cache=none \
      > "$out/domaingraphs/$name.log" 2>&1
    say "$name (2 ranks, domain parallel 2): exit $? in $((($(date +%s%N) - t1) / 1000000)) ms;" \
      "$(grep -o '"metrics": {[^}]*}' "$out/domaingraphs/$name/summary.json" | cut -c1-200)"
    say "  epoch seconds: $(grep -o '"seconds": [0-9.e+-]*' "$out/domaingraphs/$name/metrics.jsonl" |
      awk '{printf "%s ", $2}')"
    grep -h "CUDA graphs\|eagerly" "$out/domaingraphs/$name.log" | cut -c1-200 | head -3 |
      tee -a "$summary"
  done
done
