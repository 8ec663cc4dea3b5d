#!/usr/bin/env bash
# Training on benchmark files as they ship (issue 53): configs/well_tiny.yaml,
# pdebench_tiny.yaml and pdearena_tiny.yaml on the small files of
# tests/golden/benchmarks train end to end (exit 0, a metrics line per epoch,
# a test metric, the files pinned in inputs.txt); bad settings stop with one
# line naming the file and the field.
#   test_benchmark_train.sh FNO_TRAIN SOURCE_DIR WORK_DIR
set -u
bin=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for name in well pdebench pdearena; do
  run=$work/run_$name
  if ! "$bin" --config "$src/configs/${name}_tiny.yaml" --set output.progress=none --out "$run" \
       > "$work/$name.out" 2> "$work/$name.err"; then
    bad "$name: exited $?: $(tail -1 "$work/$name.err")"
    continue
  fi
  [ "$(wc -l < "$run/metrics.jsonl")" -eq 4 ] && ok || bad "$name: $(wc -l < "$run/metrics.jsonl") metrics lines"
  grep -q '"\(valid\|test\)_l2":' "$run/summary.json" && ok || bad "$name: summary.json lacks the test metric"
  grep -q "^data.train_file" "$run/inputs.txt" && ok || bad "$name: inputs.txt lacks the training files"
done
# The benchmark's metric per field, one step and rolled out over each trajectory.
for key in valid_vrmse_density valid_vrmse_velocity_y valid_rollout_vrmse_tracer valid_rollout_vrmse; do
  grep -q "\"$key\": [0-9]" "$work/run_well/summary.json" && ok || bad "well: summary.json lacks $key"
done
grep -q '"test_rollout_nrmse_Vx": [0-9]' "$work/run_pdebench/summary.json" && ok || bad "pdebench: no rollout VRMSE"
# The Well's two training shards are pinned one by one.
grep -q "^data.train_file\[1\]" "$work/run_well/inputs.txt" && ok || bad "well: inputs.txt: $(cat "$work/run_well/inputs.txt")"

well=(--config "$src/configs/well_tiny.yaml" --set output.progress=none)
expect 3 "tiny_shear_train_0.hdf5: data.fields: no field 'pressure' (found: density, tracer, viscosity, velocity)" -- "${well[@]}" --set 'data.fields=[pressure]' --out "$work/e1"
expect 3 "fewer than data.history 7 + data.horizon 1" -- "${well[@]}" --set data.history=7 --out "$work/e2"
expect 3 "no split 'test'" -- "${well[@]}" --set data.split=test --out "$work/e3"
expect 3 "model expects 9 and 4 (set model.in_channels to 13)" -- "${well[@]}" --set data.history=3 --out "$work/e4"
expect 2 "data.x_key: not used with data.format well" -- "${well[@]}" --set data.x_key=u --out "$work/e5"
finish benchmark_train
