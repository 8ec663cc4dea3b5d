#!/usr/bin/env bash
# fno_predict on Navier-Stokes runs, on a GPU: the smoke configs' data from
# fno_datagen, each smoke config (recurrent FNO-2D, space-time FNO-3D) trained
# for 2 epochs on the device, then fno_predict on the run's test file with the
# truth: its mean_l2 must equal the run's ns_l2 (the evaluation's) to 1e-5
# relative, whole grid and (recurrent) with each rollout step in tiles.
#   bench/predict_ns_check.sh [BUILD_DIR] [WORK_DIR]
# Prints one line per check, "ok" or "FAIL ..."; exits non-zero on a failure.
set -u
build=${1:-build} work=${2:-/tmp/predict_ns_check}
bin=$build/apps
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
fails=0
check() {  # check NAME GOT WANT: |got - want| <= 1e-5 |want|
  if awk -v a="$2" -v b="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
                                      exit !(a != "" && b != "" && d <= 1e-5 * m) }'; then
    echo "ok   $1: $2 (fno_train $3)"
  else
    echo "FAIL $1: $2, fno_train $3"
    fails=$((fails + 1))
  fi
}
value() { grep -o "\"$2\": [-0-9.e+]*" "$1" | head -1 | sed 's/.*: //'; }

"$bin/fno_datagen" --problem ns --viscosity 1e-3 --resolution 64 --dt 1e-2 --t-final 4 \
  --record-every 0.5 --samples 80 --test-samples 16 --seed 0 --progress none \
  --out "$work/ns.h5" > "$work/datagen.log" 2>&1 || { tail -3 "$work/datagen.log"; exit 1; }
for model in fno2d fno3d; do
  run=$work/run_$model
  "$bin/fno_train" --config "$src/configs/ns_smoke_$model.yaml" --out "$run" \
    --set "data.train_file=$work/ns_train.h5" --set data.n_train=64 \
    --set "data.test=[{file: $work/ns_test.h5, name: ns, batch_size: 8}]" \
    --set training.epochs=2 --set device.name=auto --set output.progress=none \
    > "$work/$model.log" 2>&1 || { echo "FAIL fno_train $model: $(tail -1 "$work/$model.log")"; exit 1; }
  "$bin/fno_predict" --model "$run" --input "$work/ns_test.h5" --y-key u --out "$work/$model.h5" \
    2> "$work/$model.predict.err" > /dev/null ||
    { echo "FAIL fno_predict $model: $(tail -1 "$work/$model.predict.err")"; fails=$((fails + 1)); continue; }
  grep "plan:" "$work/$model.predict.err"
  check "$model mean_l2" "$(value "$work/$model.summary.json" mean_l2)" "$(value "$run/summary.json" ns_l2)"
done
# The recurrent rollout with each step in tiles of 16 rows.
"$bin/fno_predict" --model "$work/run_fno2d" --input "$work/ns_test.h5" --y-key u --tile-rows 16 \
  --out "$work/fno2d_tiles.h5" 2> "$work/tiles.err" > /dev/null &&
  check "fno2d in tiles mean_l2" "$(value "$work/fno2d_tiles.summary.json" mean_l2)" \
    "$(value "$work/run_fno2d/summary.json" ns_l2)" ||
  { echo "FAIL fno2d in tiles: $(tail -1 "$work/tiles.err")"; fails=$((fails + 1)); }
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
