#!/usr/bin/env bash
# seed16: the Darcy seed config (16^2), seeds 0-2: fno_train (also with one checkpoint at the
#   end and no predictions) against neuraloperator (bench/neuralop_darcy.py), metrics and wall
#   time, in one call
# Run on the GPU machine from the repository root: scripts/gpu.sh seed16 (several suites
# in one call: scripts/gpu.sh seed16 OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" seed16
use_wheels
local sd
for sd in 0 1 2; do
  timeout 120 "$build/apps/fno_train" --config configs/darcy.yaml --out "$out/seed16_$sd" \
    --set training.seed=$sd --set output.progress=none > "$out/seed16_$sd.log" 2>&1
  say "fno_train seed $sd: exit $? $(cat "$out/seed16_$sd/summary.json" | cut -c1-400)"
  rm -f "$out/seed16_$sd"/*.pt
  # the same without the per-epoch checkpoints and the predictions (neuraloperator's
  # Trainer, as bench/neuralop_darcy.py runs it, writes neither)
  timeout 120 "$build/apps/fno_train" --config configs/darcy.yaml --out "$out/seed16_nockpt_$sd" \
    --set training.seed=$sd --set output.progress=none --set training.checkpoint_every=1000 \
    --set data.n_predictions=0 > "$out/seed16_nockpt_$sd.log" 2>&1
  say "fno_train seed $sd, checkpoint at the end only: exit $? $(cat "$out/seed16_nockpt_$sd/summary.json" | cut -c1-400)"
  rm -f "$out/seed16_nockpt_$sd"/*.pt
  timeout 120 python3 bench/neuralop_darcy.py --device cuda --seed $sd \
    >> "$out/seed16_neuralop.jsonl" 2> "$out/seed16_neuralop_$sd.log"
  say "neuraloperator seed $sd: exit $? $(tail -1 "$out/seed16_neuralop.jsonl" | cut -c1-400)"
done
