#!/usr/bin/env bash
# predictions256: fno_datagen 256^2 data, 30 epochs of the seed model, 4 predictions
# Run on the GPU machine from the repository root: scripts/gpu.sh predictions256 (several suites
# in one call: scripts/gpu.sh predictions256 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" predictions256
# a model trained on the GPU at 256^2 (fno_datagen data), for its predictions
local d=$out/predictions256
mkdir -p "$d"
"$build/apps/fno_datagen" --resolution 256 --samples 1100 --test-samples 100 --seed 0 \
  --device cuda --out /tmp/darcy256.h5 > "$d/datagen.log" 2>&1
"$build/apps/fno_train" --config configs/darcy.yaml --out "$d/run" \
  --set data.train_file=/tmp/darcy256_train.h5 --set data.n_train=1000 \
  --set "data.test=[{file: /tmp/darcy256_test.h5, name: '256', n_samples: 100, batch_size: 20}]" \
  --set training.epochs=30 --set data.n_predictions=4 --set output.progress=plain \
  > "$d/train.log" 2>&1
say "predictions256: exit $? $(tail -1 "$d/run/metrics.jsonl" | cut -c1-200)"
