#!/usr/bin/env bash
# fno_predict from the outside: a tiny fno_train run on the CPU, then its model
# applied zero-shot to the shipped 32x32 test set (trained at 16x16): the
# per-sample errors' mean equals fno_train's 32_l2 and 32_h1 (the same
# normalizers, now from normalizers.pt), the range and x-only reads, an
# existing --out refused, and bad inputs: one line, exit code, no file left.
#   test_fno_predict.sh FNO_PREDICT FNO_TRAIN SOURCE_DIR WORK_DIR
set -u
bin=$1 train=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
test32=$src/data/darcy/darcy_test_32.pt
test16=$src/data/darcy/darcy_test_16.pt
run=$work/run

# A summary.json value: "key": number.
value() { grep -o "\"$2\": [-0-9.e+]*" "$1" | head -1 | sed 's/.*: //'; }
# |a - b| <= tol * |b|
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= t * m) }'; }

"$train" --config "$src/configs/darcy.yaml" --out "$run" --set training.epochs=1 \
  --set data.n_train=64 --set device.name=cpu --set output.progress=none > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; bad "fno_train failed"; finish; exit 1; }
[ -f "$run/normalizers.pt" ] && [ -f "$run/model.pt" ] && ok || bad "the run lacks normalizers.pt or model.pt"

"$bin" --help > "$work/help" 2>&1 && grep -q -- "--gpu-memory-limit" "$work/help" && ok || bad "--help"

# Zero-shot at 32x32: the mean of the per-sample errors is fno_train's metric.
if "$bin" --model "$run" --input "$test32" --y-key y --out "$work/p32.h5" --device cpu \
    > "$work/p32.log" 2> "$work/p32.err"; then
  ok
  grep -q "plan: cpu, fp32, 50 sample(s) at 32x32: whole grid" "$work/p32.err" && ok ||
    bad "no plan line: $(cat "$work/p32.err")"
  [ -f "$work/p32.h5" ] && [ -f "$work/p32.summary.json" ] && ok || bad "p32.h5 or its summary missing"
  for m in l2 h1; do
    want=$(value "$run/summary.json" "32_$m") got=$(value "$work/p32.summary.json" "mean_$m")
    close "$got" "$want" 1e-5 && ok || bad "mean_$m $got differs from fno_train's 32_$m $want"
  done
  grep -q '"n_samples": 50' "$work/p32.summary.json" && ok || bad "n_samples in the summary"
  # each batch's forward seconds (50 samples in batches of 32: two), on stdout and in the summary
  [ "$(awk '/^forward_seconds/ {print NF - 1}' "$work/p32.log")" = 2 ] &&
    grep -q '"forward_seconds": \[[0-9.e+-]*, [0-9.e+-]*\]' "$work/p32.summary.json" && ok ||
    bad "forward_seconds, one per batch: $(grep forward "$work/p32.log" "$work/p32.summary.json")"
else
  bad "fno_predict at 32x32 failed: $(cat "$work/p32.err")"
fi

# The training grid too, with a range; and x alone (no truth, no summary).
"$bin" --model "$run" --input "$test16" --y-key y --samples 10:5 --batch-size 2 \
  --out "$work/p16.h5" --device cpu > /dev/null 2> "$work/p16.err" &&
  grep -q '"n_samples": 5' "$work/p16.summary.json" && grep -q '"first": 10' "$work/p16.summary.json" &&
  ok || bad "--samples 10:5: $(cat "$work/p16.err")"
"$bin" --model "$run" --input "$test32" --samples 48: --out "$work/x_only.h5" > /dev/null 2> "$work/x.err" &&
  [ -f "$work/x_only.h5" ] && [ ! -e "$work/x_only.summary.json" ] && ok || bad "x only: $(cat "$work/x.err")"
# A named checkpoint: its own norm.* keys; the same errors.
"$bin" --model "$run" --checkpoint "$run/checkpoint_latest.pt" --input "$test32" --y-key y \
  --out "$work/ckpt.h5" > /dev/null 2> "$work/ckpt.err" &&
  close "$(value "$work/ckpt.summary.json" mean_l2)" "$(value "$run/summary.json" 32_l2)" 1e-5 &&
  ok || bad "--checkpoint: $(cat "$work/ckpt.err")"
# An older run (no normalizers.pt): the latest checkpoint's norm.* keys.
cp -r "$run" "$work/old" && rm "$work/old/normalizers.pt"
"$bin" --model "$work/old" --input "$test32" --y-key y --out "$work/old.h5" > /dev/null 2> "$work/old.err" &&
  close "$(value "$work/old.summary.json" mean_l2)" "$(value "$run/summary.json" 32_l2)" 1e-5 &&
  ok || bad "a run without normalizers.pt: $(cat "$work/old.err")"

# Streamed: an HDF5 input without truth in tiles, its rows read and written per tile.
"$bin" --model "$run" --input "$work/x_only.h5" --x-key pred --tile-rows 8 --host-memory-limit 64MiB \
  --out "$work/s.h5" --device cpu > /dev/null 2> "$work/s.err" &&
  grep -q "streamed in tiles of 8 rows" "$work/s.err" && [ -f "$work/s.h5" ] && ok ||
  bad "streamed: $(cat "$work/s.err")"
# A neuraloperator 2.0.0 state dict with its settings in YAML.
printf 'model: {n_modes: [8, 6], in_channels: 1, out_channels: 2, hidden_channels: 8, n_layers: 3}\n' \
  > "$work/nop.yaml"
"$bin" --model "$src/tests/golden/fno2d_even_state.pt" --model-config "$work/nop.yaml" \
  --input "$work/x_only.h5" --x-key pred --out "$work/nop.h5" --device cpu > /dev/null 2> "$work/nop.err" &&
  [ -f "$work/nop.h5" ] && ok || bad "a state dict with --model-config: $(cat "$work/nop.err")"

# Several inputs, one set of samples: the same file twice holds each sample twice,
# so the errors' means are the file's; repeated --input or files after one --input.
if "$bin" --model "$run" --input "$test16" --input "$test16" --y-key y --samples 45:10 \
    --out "$work/two.h5" --device cpu > /dev/null 2> "$work/two.err" &&
  "$bin" --model "$run" --input "$test16" "$test16" --y-key y --out "$work/two_all.h5" \
    --device cpu > /dev/null 2>> "$work/two.err" &&
  "$bin" --model "$run" --input "$test16" --y-key y --out "$work/one_all.h5" --device cpu \
    > /dev/null 2>> "$work/two.err"; then
  grep -q '"n_samples": 10' "$work/two.summary.json" &&
    grep -q "\"inputs\": \[\"$test16\", \"$test16\"\]" "$work/two.summary.json" && ok ||
    bad "two inputs: $(cat "$work/two.summary.json")"
  for m in l2 h1; do
    close "$(value "$work/two_all.summary.json" "mean_$m")" "$(value "$work/one_all.summary.json" "mean_$m")" 1e-6 &&
      ok || bad "two inputs: mean_$m differs from the file's"
  done
else
  bad "two inputs: $(cat "$work/two.err")"
fi
# Errors against the truth, streamed (the truth read per tile) and in memory: the same.
"$bin" --model "$run" --input "$work/x_only.h5" --x-key pred --y-key pred --out "$work/t_mem.h5" \
  --device cpu > /dev/null 2> "$work/t.err" &&
  "$bin" --model "$run" --input "$work/x_only.h5" --x-key pred --y-key pred --tile-rows 8 \
    --host-memory-limit 64MiB --out "$work/t_s.h5" --device cpu > /dev/null 2>> "$work/t.err" &&
  grep -q "streamed in tiles of 8 rows" "$work/t.err" &&
  close "$(value "$work/t_s.summary.json" mean_l2)" "$(value "$work/t_mem.summary.json" mean_l2)" 1e-5 &&
  close "$(value "$work/t_s.summary.json" mean_h1)" "$(value "$work/t_mem.summary.json" mean_h1)" 1e-5 &&
  ok || bad "streamed errors: $(cat "$work/t.err" "$work/t_s.summary.json" "$work/t_mem.summary.json")"
# A state dict's model settings as flags (fno_train's config keys), over --model-config's.
nop="$src/tests/golden/fno2d_even_state.pt"
"$bin" --model "$nop" --set 'model.n_modes=[8, 6]' --set model.out_channels=2 --set model.hidden_channels=8 \
  --set model.n_layers=3 --input "$work/x_only.h5" --x-key pred --out "$work/nop_set.h5" --device cpu \
  > /dev/null 2> "$work/nop_set.err" && [ -f "$work/nop_set.h5" ] && ok || bad "--set: $(cat "$work/nop_set.err")"
printf 'model: {n_modes: [8, 6], in_channels: 1, out_channels: 2, hidden_channels: 4, n_layers: 3}\n' \
  > "$work/nop4.yaml"
"$bin" --model "$nop" --model-config "$work/nop4.yaml" --set model.hidden_channels=8 \
  --input "$work/x_only.h5" --x-key pred --out "$work/nop_over.h5" --device cpu > /dev/null 2> "$work/nop_over.err" &&
  [ -f "$work/nop_over.h5" ] && ok || bad "--set over --model-config: $(cat "$work/nop_over.err")"

# Progress: quiet for short runs; with --progress-every 0, a plain line for each
# batch of samples (in memory) or each tile read or written (streamed) but the last.
"$bin" --model "$run" --input "$test32" --samples 0:6 --out "$work/q.h5" --progress bar \
  > /dev/null 2> "$work/q.err" && [ "$(wc -l < "$work/q.err")" -eq 1 ] && ok ||
  bad "a short run showed progress: $(cat "$work/q.err")"
"$bin" --model "$run" --input "$test16" --samples 10:5 --batch-size 2 --out "$work/prog.h5" \
  --progress plain --progress-every 0 > /dev/null 2> "$work/prog.err" &&
  [ "$(grep -c '^predict: sample [24]/5 ([48]0%), [0-9]* samples/s, [0-9]*s left$' "$work/prog.err")" -eq 2 ] &&
  ok || bad "progress of samples: $(cat "$work/prog.err")"
layers=$(sed -n 's/^  n_layers: //p' "$run/config.yaml")
if "$bin" --model "$run" --input "$work/x_only.h5" --x-key pred --tile-rows 8 --host-memory-limit 64MiB \
    --out "$work/prog_s.h5" --device cpu --progress plain --progress-every 0 > /dev/null 2> "$work/prog_s.err"; then
  # 2 samples of 4 tiles: each read by the lifting's sweep (and by each block's
  # sweep when block inputs are remade), each written once.
  if grep -q "remade" "$work/prog_s.err"; then calls=$((2 * 4 * (layers + 2))); else calls=$((2 * 4 * 2)); fi
  [ "$(grep -c "^predict sample [12]/2: tile [0-9]*/$calls (" "$work/prog_s.err")" -eq $((calls - 1)) ] &&
    grep -q "^predict sample 2/2: tile $((calls - 1))/$calls (" "$work/prog_s.err" && ok ||
    bad "progress of tiles ($calls calls, $layers layers): $(cat "$work/prog_s.err")"
else
  bad "streamed with progress: $(cat "$work/prog_s.err")"
fi

# A write that fails partway (over the file-size limit: EFBIG), in memory and
# streamed, and replacing a file: one line naming the output, exit 3, no file
# left, the replaced file as it was.
big_fails() {  # big_fails NAME ARGS...: fno_predict under a 64 KiB file-size limit
  local name=$1; shift
  (ulimit -f 64; exec "$bin" --model "$run" --device cpu --progress none --out "$work/$name" "$@") \
    > /dev/null 2> "$work/big.err"
  local rc=$?
  [ "$rc" -eq 3 ] && [ "$(wc -l < "$work/big.err")" -eq 1 ] && grep -q "$name" "$work/big.err" &&
    grep -q "File too large" "$work/big.err" && ok ||
    bad "$name over the file-size limit: exit $rc: $(cat "$work/big.err")"
  [ -z "$(find "$work" -maxdepth 1 -name "*$name*" ! -name victim.h5)" ] && ok ||
    bad "$name over the file-size limit left $(find "$work" -maxdepth 1 -name "*$name*")"
}
big_fails big.h5 --input "$test32"
big_fails big_s.h5 --input "$work/p32.h5" --x-key pred --tile-rows 16
cp "$work/p32.h5" "$work/victim.h5" && before=$(cksum < "$work/victim.h5")
big_fails victim.h5 --input "$test32" --overwrite
[ "$(cksum < "$work/victim.h5")" = "$before" ] && ok || bad "a failed --overwrite changed the file"

# A read that fails partway: a chunk of the input damaged (its deflate stream),
# read when the stream reaches it.
cp "$work/p32.h5" "$work/damaged.h5"
size=$(stat -c %s "$work/damaged.h5")
head -c 4096 /dev/zero | tr '\0' 'x' |
  dd of="$work/damaged.h5" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect 3 "damaged.h5: cannot read dataset 'pred'" -- --model "$run" --input "$work/damaged.h5" \
  --x-key pred --tile-rows 16 --device cpu --progress none --out "$work/dmg.h5"
[ -z "$(find "$work" -maxdepth 1 -name '*dmg*')" ] && ok || bad "a failed read left $(find "$work" -maxdepth 1 -name '*dmg*')"

# An existing --out is refused (exit 2), and replaced with --overwrite.
before=$(cksum < "$work/p32.h5")
expect 2 "p32.h5 exists; choose another --out or pass --overwrite" -- \
  --model "$run" --input "$test32" --out "$work/p32.h5"
[ "$(cksum < "$work/p32.h5")" = "$before" ] && ok || bad "the refused --out changed"
"$bin" --model "$run" --input "$test32" --y-key y --samples 0:3 --out "$work/p32.h5" --overwrite \
  > /dev/null 2>&1 && grep -q '"n_samples": 3' "$work/p32.summary.json" && ok || bad "--overwrite"

# Bad command lines and inputs: one line, the exit code, no output file.
printf 'garbage bytes, not a tensor file' > "$work/garbage.pt"
mkdir -p "$work/wrong_model" && cp "$run/model.pt" "$run/normalizers.pt" "$work/wrong_model/" &&
  sed 's/hidden_channels: 32/hidden_channels: 16/' "$run/config.yaml" > "$work/wrong_model/config.yaml"
expect 2 "required" -- --model "$run" --out "$work/e.h5"
expect 2 "--samples: expected FIRST:COUNT" -- --model "$run" --input "$test32" --samples x --out "$work/e.h5"
expect 2 "--samples: COUNT must be >= 1" -- --model "$run" --input "$test32" --samples 3:0 --out "$work/e.h5"
expect 2 "--precision: " -- --model "$run" --input "$test32" --precision fp8 --out "$work/e.h5"
expect 2 "--gpu-memory-limit: " -- --model "$run" --input "$test32" --gpu-memory-limit lots --out "$work/e.h5"
expect 2 "asks past the 50 samples" -- --model "$run" --input "$test32" --samples 50: --out "$work/e.h5"
expect 2 "--samples 45:10 asks past the 50 samples" -- --model "$run" --input "$test32" --samples 45:10 --out "$work/e.h5"
expect 3 "nowhere: not a run directory (no config.yaml)" -- --model "$work/nowhere" --input "$test32" --out "$work/e.h5"
expect 3 "garbage.pt: neither a torch.save" -- --model "$run" --input "$work/garbage.pt" --out "$work/e.h5"
expect 3 "darcy_test_32.pt: no entry 'truth'" -- --model "$run" --input "$test32" --y-key truth --out "$work/e.h5"
expect 3 "model.pt does not match .*config.yaml's model" -- --model "$work/wrong_model" --input "$test32" --out "$work/e.h5"
expect 3 "missing.pt: no such file" -- --model "$run" --checkpoint "$work/missing.pt" --input "$test32" --out "$work/e.h5"
expect 3 "e.h5" -- --model "$run" --input "$test32" --out "$work/no/such/dir/e.h5"
expect 2 "--host-memory-limit: " -- --model "$run" --input "$test32" --host-memory-limit lots --out "$work/e.h5"
expect 2 "--cuda-graphs: maybe not in {auto,on,off}" -- --model "$run" --input "$test32" --cuda-graphs maybe --out "$work/e.h5"
expect 3 "--host-memory-limit 1000000 B is under the floor: streaming one sample" -- --model "$run" \
  --input "$work/x_only.h5" --x-key pred --tile-rows 8 --host-memory-limit 1MB --device cpu --out "$work/e.h5"
expect 3 "the input and output held whole need about" -- --model "$run" --input "$test32" \
  --host-memory-limit 100kB --device cpu --out "$work/e.h5"
expect 3 "seed_state.pt does not match .*nop.yaml's model" -- --model "$src/tests/golden/seed_state.pt" \
  --model-config "$work/nop.yaml" --input "$work/x_only.h5" --x-key pred --out "$work/e.h5"
expect 3 "darcy_test_16.pt: 'x' is 50x1x16x16 where .*darcy_test_32.pt's is 50x1x32x32 (samples, channels, grid): the --input files must agree" -- \
  --model "$run" --input "$test32" --input "$test16" --out "$work/e.h5"
expect 2 "--samples 95:10 asks past the 100 samples the 2 --input files hold" -- --model "$run" \
  --input "$test32" "$test32" --samples 95:10 --out "$work/e.h5"
expect 3 "fno2d_even_state.pt does not match the --set model settings: state_dict key .* shape" -- \
  --model "$nop" --set 'model.n_modes=[8, 6]' --set model.out_channels=2 --set model.hidden_channels=16 \
  --set model.n_layers=3 --input "$work/x_only.h5" --x-key pred --out "$work/e.h5"
expect 2 "--set model.n_layers=many" -- --model "$nop" --set model.n_layers=many \
  --input "$work/x_only.h5" --x-key pred --out "$work/e.h5"
expect 2 "--set training.epochs=2: only the model's settings" -- --model "$nop" --set training.epochs=2 \
  --input "$work/x_only.h5" --x-key pred --out "$work/e.h5"
expect 2 "with --model-config or --set, --model names a state dict file" -- --model "$run" \
  --set model.n_layers=2 --input "$test32" --out "$work/e.h5"
[ -z "$(find "$work" -maxdepth 1 -name 'e.*')" ] && ok || bad "an error left $(find "$work" -maxdepth 1 -name 'e.*')"

finish fno_predict_cli
