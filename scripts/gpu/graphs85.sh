#!/usr/bin/env bash
# graphs85: configs/darcy_paper_s85.yaml (data by fno_datagen, 1200 samples at 421^2 every 5th
#   node) for GRAPHS85_EPOCHS (20) epochs with graphs off and on: seconds per epoch, and 500
#   epochs extrapolated
# Run on the GPU machine from the repository root: scripts/gpu.sh graphs85 (several suites
# in one call: scripts/gpu.sh graphs85 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: GRAPHS85_EPOCHS (20)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" graphs85
# the paper's s = 85 run (batch 20, 85^2), a few epochs each way
local d=$out/graphs85 data=/tmp/paper_data epochs=${GRAPHS85_EPOCHS:-20}
mkdir -p "$d" "$data"
local t1
t1=$(date +%s)
[ -f "$data/darcy_s85_train.h5" ] ||
  "$build/apps/fno_datagen" --resolution 421 --subsample 5 --samples 1200 --test-samples 200 \
    --seed 0 --device cuda --progress none --out "$data/darcy_s85.h5" > "$d/datagen.log" 2>&1
say "s85 data: $(($(date +%s) - t1)) s"
for g in off on; do
  t1=$(date +%s%N)
  timeout 150 "$build/apps/fno_train" --config configs/darcy_paper_s85.yaml \
    --out "$d/run_$g" --set "data.train_file=$data/darcy_s85_train.h5" \
    --set "data.test=[{file: $data/darcy_s85_test.h5, name: '85', n_samples: 200, batch_size: 20}]" \
    --set training.epochs=$epochs --set training.cuda_graphs=$g --set output.progress=plain \
    > "$d/run_$g.log" 2>&1
  local rc=$? ms=$((($(date +%s%N) - t1) / 1000000))
  say "s85 $epochs epochs, cuda_graphs $g: exit $rc in $ms ms; $(tail -1 "$d/run_$g/metrics.jsonl" | cut -c1-160)"
  # 500 epochs: the process less its epochs, the first epoch (warm-up, captures), and
  # 499 times the mean of the others
  grep -o '"seconds": [0-9.e+-]*' "$d/run_$g/metrics.jsonl" | awk -v ms=$ms -v n=$epochs \
    '{ s += $2; if (NR == 1) first = $2 } END { rest = (s - first) / (n - 1);
       printf "  epochs %.2f s in all, the first %.3f s, the others %.4f s each; 500 epochs: about %.0f s\n",
              s, first, rest, (ms / 1000 - s) + first + 499 * rest }' |
    tee -a "$summary"
done
