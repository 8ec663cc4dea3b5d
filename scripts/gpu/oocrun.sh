#!/usr/bin/env bash
# oocrun: the whole fno_train run at 1024^2, b8, 3 epochs: none and auto under 4 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh oocrun (several suites
# in one call: scripts/gpu.sh oocrun OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" oocrun
# the whole fno_train run at 1024^2, batch 8, 64 + 8 samples, 3 epochs: none,
# and auto under 4 GiB (its peak_gpu_bytes must stay under the budget)
local d=$out/oocrun
mkdir -p "$d"
"$build/apps/fno_datagen" --resolution 1024 --samples 72 --test-samples 8 --seed 0 \
  --device cuda --out "$d/darcy1024.h5" > "$d/datagen.log" 2>&1
say "oocrun datagen: exit $?"
for run in "none" "auto --gpu-memory-limit 4GiB"; do
  local name=${run%% *}
  # shellcheck disable=SC2086
  timeout 300 "$build/apps/fno_train" --config configs/darcy.yaml --out "$d/$name" \
    --set "data.train_file=$d/darcy1024_train.h5" --set data.n_train=64 \
    --set data.batch_size=8 --set training.epochs=3 --set data.n_predictions=2 \
    --set "data.test=[{file: $d/darcy1024_test.h5, batch_size: 8}]" --offload $run \
    > "$d/$name.stdout" 2> "$d/$name.stderr"
  say "oocrun $run: exit $? $(tr '\n' ' ' < "$d/$name.stdout" | cut -c1-200)"
  grep -o '"peak_gpu_bytes": [0-9]*' "$d/$name/metrics.jsonl" | tr '\n' ' ' | tee -a "$summary"
  echo | tee -a "$summary"
done
