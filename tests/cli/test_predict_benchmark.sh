#!/usr/bin/env bash
# fno_predict on runs trained on benchmark files (issue 53): configs/well_tiny.yaml
# trained on the CPU with The Well's own statistics (data.normalization
# benchmark), a scalar as an input (data.scalars) and the padding from the
# files' boundary conditions (model.domain_padding_auto), then fno_predict on
# its valid split: the VRMSE per field, one step and rolled out, equals
# fno_train's summary.json; the same for a PDEBench run (nRMSE); the output
# names its channels; options that do not apply, a bad split and an existing
# output: one line, an exit code.
#   test_predict_benchmark.sh FNO_PREDICT FNO_TRAIN SOURCE_DIR WORK_DIR
set -u
bin=$1 train=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
well=$src/tests/golden/benchmarks/well

# A summary.json value: "key": number.
value() { grep -o "\"$2\": [-0-9.e+]*" "$1" | head -1 | sed 's/.*: //'; }
# |a - b| <= tol * |b|
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= t * m) }'; }

run=$work/well
"$train" --config "$src/configs/well_tiny.yaml" --out "$run" --set output.progress=none \
  --set data.normalization=benchmark --set 'data.scalars=[reynolds]' --set model.in_channels=10 \
  --set model.domain_padding_auto=0.25 > "$work/train.log" 2> "$work/train.err" ||
  { cat "$work/train.err"; bad "fno_train failed"; finish; exit 1; }
# The padding chosen from the boundary conditions: one line, and config.yaml records it.
grep -q "model.domain_padding_auto 0.25 from .*: x PERIODIC -> 0, y WALL -> 0.25, so model.domain_padding \[0, 0.25\]" \
  "$work/train.err" && ok || bad "no padding line: $(cat "$work/train.err")"
grep -q "^  domain_padding: \[0, 0.25\]$" "$run/config.yaml" && ok || bad "config.yaml: $(grep padding "$run/config.yaml")"
grep -q "^  domain_padding_auto: 0$" "$run/config.yaml" && ok || bad "config.yaml keeps domain_padding_auto"
grep -q "^  normalization: benchmark$" "$run/config.yaml" && ok || bad "config.yaml: normalization"

"$bin" --help > "$work/help" 2>&1 && grep -q -- "--rollout" "$work/help" && ok || bad "--help lacks --rollout"

# Its valid split (the run's test set's, by default), one step and rolled out.
if "$bin" --model "$run" --input "$well" --rollout --out "$work/p.h5" --device cpu \
    > "$work/p.log" 2> "$work/p.err"; then
  ok
  grep -q "plan: cpu, fp32, 15 window(s) of well split 'valid' at 6x8" "$work/p.err" && ok ||
    bad "plan line: $(cat "$work/p.err")"
  for key in vrmse_density vrmse_tracer vrmse_velocity_x vrmse_velocity_y vrmse \
             rollout_vrmse_density rollout_vrmse_velocity_y rollout_vrmse; do
    want=$(value "$run/summary.json" "valid_$key") got=$(value "$work/p.summary.json" "$key")
    close "$got" "$want" 1e-5 && ok || bad "$key $got differs from fno_train's valid_$key $want"
  done
  grep -q "^vrmse_density [0-9]" "$work/p.log" && ok || bad "stdout lacks vrmse_density"
  # The channels' names as attributes.
  for name in "t0:density, t0:tracer, t0:velocity_x, t0:velocity_y" \
              "t1:velocity_y, viscosity, reynolds" "density, tracer, velocity_x, velocity_y"; do
    grep -aqF "$name" "$work/p.h5" && ok || bad "p.h5 lacks the channels '$name'"
  done
else
  bad "fno_predict failed: $(cat "$work/p.err")"
fi
# A range of windows, without the rollout.
"$bin" --model "$run" --input "$well" --samples 3:4 --out "$work/r.h5" --device cpu \
  > /dev/null 2> "$work/r.err" && grep -q '"n_windows": 4' "$work/r.summary.json" &&
  ! grep -q rollout "$work/r.summary.json" && ok || bad "--samples 3:4: $(cat "$work/r.err")"

# PDEBench: nRMSE.
prun=$work/pdebench
if "$train" --config "$src/configs/pdebench_tiny.yaml" --out "$prun" --set output.progress=none \
    > /dev/null 2> "$work/ptrain.err" &&
   "$bin" --model "$prun" --input "$src/tests/golden/benchmarks/pdebench/2D_CFD_tiny.hdf5" \
    --rollout --out "$work/pb.h5" --device cpu > /dev/null 2> "$work/pb.err"; then
  for key in nrmse_density nrmse_Vy nrmse rollout_nrmse_Vx; do
    want=$(value "$prun/summary.json" "test_$key") got=$(value "$work/pb.summary.json" "$key")
    close "$got" "$want" 1e-5 && ok || bad "pdebench: $key $got differs from fno_train's test_$key $want"
  done
else
  bad "pdebench: $(cat "$work/ptrain.err" "$work/pb.err")"
fi

p=(--model "$run" --input "$well" --device cpu)
expect 2 "--y-key: not used with a run trained on benchmark data" -- "${p[@]}" --y-key u --out "$work/e1.h5"
expect 3 "no split 'test'" -- "${p[@]}" --split test --out "$work/e2.h5"
expect 2 "p.h5 exists; choose another --out or pass --overwrite" -- "${p[@]}" --out "$work/p.h5"
expect 2 "asks past the 15 windows of split 'valid'" -- "${p[@]}" --samples 14:2 --out "$work/e3.h5"
expect 3 "no group 'dimensions' (not The Well's layout)" -- --model "$run" --device cpu \
  --input "$src/tests/golden/benchmarks/pdearena/NavierStokes2D_valid_tiny.h5" --out "$work/e4.h5"
for f in e1 e2 e3 e4; do [ ! -e "$work/$f.h5" ] && ok || bad "$f.h5 left behind"; done
# fno_train: a boundary condition The Well does not know, with the padding from them.
bin=$train
expect 3 "well_bad_bc.hdf5: 'boundary_conditions/y_wall': bc_type 'NEUMANN' is none of WALL, OPEN, PERIODIC" -- \
  --config "$src/configs/well_tiny.yaml" --set output.progress=none --set model.domain_padding_auto=0.25 \
  --set "data.train_file=$src/tests/golden/benchmarks/well_bad_bc.hdf5" --out "$work/e5"
finish predict_benchmark
