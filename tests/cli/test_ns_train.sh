#!/usr/bin/env bash
# Navier-Stokes training from the command line (issue 27, item 3): a tiny set
# from fno_datagen --problem ns, then configs/ns_smoke_fno2d.yaml (recurrent
# FNO-2D) and configs/ns_smoke_fno3d.yaml (space-time FNO-3D) on it. Each run
# exits 0 with a lower training loss at the end than after the first epoch,
# the error per predicted record in every metrics line and in predictions.h5;
# bad settings and files stop with one line and exit 2 (config) or 3 (data).
# The two run directories are the fixture of the notebook test
# (notebooks/navier_stokes.ipynb).
#   test_ns_train.sh FNO_TRAIN FNO_DATAGEN SOURCE_DIR WORK_DIR
set -u
bin=$1 datagen=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The smoke configs' data command, into the work directory.
"$datagen" --problem ns --viscosity 1e-3 --resolution 16 --dt 1e-2 --t-final 4 --record-every 0.5 \
  --samples 40 --test-samples 8 --seed 0 --device cpu --progress none --out "$work/ns_smoke.h5" \
  > "$work/datagen.out" 2>&1 || bad "fno_datagen: $(tail -1 "$work/datagen.out")"
data=(--set "data.train_file=$work/ns_smoke_train.h5"
      --set "data.test=[{file: $work/ns_smoke_test.h5, name: ns, batch_size: 8}]")

# first_loss / last_loss RUN: train_loss of the first / last metrics line.
loss_of() { sed -n "$1" "$2/metrics.jsonl" | sed 's/.*"train_loss": \([^,]*\),.*/\1/'; }
for model in fno2d fno3d; do
  run=$work/run_$model
  if ! "$bin" --config "$src/configs/ns_smoke_$model.yaml" "${data[@]}" --set output.progress=none \
       --out "$run" > "$work/$model.out" 2> "$work/$model.err"; then
    bad "$model: exited $?: $(tail -1 "$work/$model.err")"
    continue
  fi
  first=$(loss_of 1p "$run") last=$(loss_of '$p' "$run")
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a) }' && ok ||
    bad "$model: training loss $first -> $last, expected a drop of 30% or more"
  [ "$(wc -l < "$run/metrics.jsonl")" -eq 10 ] && ok || bad "$model: $(wc -l < "$run/metrics.jsonl") metrics lines"
  [ "$(grep -c '"ns_l2_per_step": \[[^],]*,[^],]*,[^],]*,[^],]*\]' "$run/metrics.jsonl")" -eq 10 ] && ok ||
    bad "$model: metrics lines without 4 errors per record: $(tail -1 "$run/metrics.jsonl")"
  grep -q '"ns_l2":' "$run/summary.json" && ok || bad "$model: summary.json lacks ns_l2"
  [ -s "$run/predictions.h5" ] && ok || bad "$model: no predictions.h5"
done

# Bad settings and files: one line, exit 2 (the config) or 3 (the data).
cfg2=(--config "$src/configs/ns_smoke_fno2d.yaml" "${data[@]}")
cfg3=(--config "$src/configs/ns_smoke_fno3d.yaml" "${data[@]}")
expect 2 "data.t_in: expected an integer >= 1, got 0" -- "${cfg2[@]}" --set data.t_in=0 --out "$work/bad1"
expect 2 "data.t_out: expected -1 (the rest) or >= 1, got 0" -- "${cfg3[@]}" --set data.t_out=0 --out "$work/bad2"
expect 2 "data.ns_mode: unknown value 'sideways'" -- "${cfg2[@]}" --set data.ns_mode=sideways --out "$work/bad3"
expect 2 "offload.policy: 'all' does not apply to data.ns_mode recurrent" -- "${cfg2[@]}" --offload all --out "$work/bad4"
expect 2 "data.encode_output: must be false with data.ns_mode recurrent" -- "${cfg2[@]}" --set data.encode_output=true --out "$work/bad5"
expect 3 "ns_smoke_train.h5: dataset 'u' holds 8 records; t_in 4 and t_out 5 need 9" -- "${cfg3[@]}" --set data.t_out=5 --out "$work/bad6"
expect 3 "ns_smoke_train.h5: dataset 'a' has rank 3, expected (N, R, R, T) records" -- "${cfg2[@]}" --set data.x_key=a --out "$work/bad7"
expect 3 "space_time trains a 3D FNO over (x, y, t), but model.n_modes has 2 entries" -- "${cfg3[@]}" --set "model.n_modes=[8, 8]" --set "model.domain_padding=[]" --out "$work/bad8"
expect 3 "need model.in_channels 4 and model.out_channels 1, got 3 and 1" -- "${cfg2[@]}" --set model.in_channels=3 --out "$work/bad9"

finish test_ns_train
