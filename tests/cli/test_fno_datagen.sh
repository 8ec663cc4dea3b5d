#!/usr/bin/env bash
# fno_datagen from the outside: exit codes and one-line errors for bad
# arguments, the 64x64 run, byte-identical reruns, and SIGINT/SIGTERM, which
# must leave neither the output nor a temporary file; --problem poisson3d, and
# one epoch of fno_train (beside fno_datagen) with configs/poisson3d.yaml on
# the 3D data it writes.
#   test_fno_datagen.sh FNO_DATAGEN WORK_DIR
set -u
bin=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin" --help > "$work/help" 2>&1 && grep -q -- "--subsample" "$work/help" && grep -q -- "--test-samples" "$work/help" && ok || bad "--help"

base=(--resolution 64 --samples 4 --seed 1 --device cpu --progress none)
expect 2 "out is required\|--out" -- --resolution 64 --samples 4 --seed 1
expect 2 "bogus" -- "${base[@]}" --out "$work/d.h5" --bogus
expect 2 "resolution" -- --resolution abc --samples 4 --seed 1 --out "$work/d.h5"
expect 2 "resolution must be >= 3, got 2" -- --resolution 2 --samples 4 --seed 1 --out "$work/d.h5"
expect 2 "samples must be >= 1, got 0" -- --resolution 64 --samples 0 --seed 1 --out "$work/d.h5"
expect 2 "subsample 5 does not divide resolution - 1 = 63" -- "${base[@]}" --subsample 5 --out "$work/d.h5"
expect 2 "test_samples must be in \[0, samples - 1\]" -- "${base[@]}" --test-samples 4 --out "$work/d.h5"
expect 2 "device 'tpu'" -- --resolution 64 --samples 4 --seed 1 --device tpu --out "$work/d.h5"
expect 2 "progress" -- "${base[@]}" --progress fancy --out "$work/d.h5"
expect 2 "seed: '-1' is not a decimal integer" -- --resolution 64 --samples 4 --seed -1 --out "$work/d.h5"
expect 2 "seed: '99999999999999999999' is not a decimal integer" -- --resolution 64 --samples 4 --seed 99999999999999999999 --out "$work/d.h5"
expect 2 "seed: '0x10' is not a decimal integer" -- --resolution 64 --samples 4 --seed 0x10 --out "$work/d.h5"
expect 2 "samples must be <= 1000000000, got 4503599627370496" -- --resolution 64 --samples 4503599627370496 --seed 1 --out "$work/d.h5"
expect 2 "out: '$work' is a directory" -- "${base[@]}" --out "$work"
expect 3 "cannot create a temporary file" -- "${base[@]}" --out "$work/no/such/dir/d.h5"
p3=(--problem poisson3d --samples 4 --seed 1 --device cpu --progress none)
expect 2 "problem: nope not in" -- --problem nope --resolution 16 --samples 4 --seed 1 --out "$work/p.h5"
expect 2 "resolution must be >= 4, got 3" -- "${p3[@]}" --resolution 3 --out "$work/p.h5"
expect 2 "resolution must be <= 1024, got 2048" -- "${p3[@]}" --resolution 2048 --out "$work/p.h5"
expect 2 "subsample 3 does not divide resolution = 16" -- "${p3[@]}" --resolution 16 --subsample 3 --out "$work/p.h5"
expect 2 "tolerance applies to --problem darcy only" -- "${p3[@]}" --resolution 16 --tolerance 1e-8 --out "$work/p.h5"
expect 2 "test_samples must be in \[0, samples - 1\]" -- "${p3[@]}" --resolution 16 --test-samples 4 --out "$work/p.h5"
[ -z "$(ls -A "$work" | grep -v '^out$\|^err$\|^help$')" ] && ok || bad "a refused run left files: $(ls -A "$work")"

# Integers are decimal: "010" is ten (CLI11 alone would read octal 8).
"$bin" --resolution 17 --samples 010 --seed 1 --device cpu --progress none --out "$work/ten.h5" > "$work/out" 2>&1 &&
  grep -qx "samples 10" "$work/out" && ok || bad "--samples 010: $(cat "$work/out")"
rm -f "$work/ten.h5"

# The 64x64 run, twice: exit 0, the same bytes.
if "$bin" "${base[@]}" --out "$work/d.h5" > "$work/out" 2> "$work/err" &&
   grep -q "wrote $work/d.h5" "$work/out" && [ -s "$work/d.h5" ]; then ok; else bad "64x64 run: $(cat "$work/err")"; fi
"$bin" "${base[@]}" --out "$work/d2.h5" > /dev/null 2>&1 || bad "second 64x64 run"
# The command line is an attribute: rerun with the same one into another directory.
mkdir -p "$work/again" && (cd "$work/again" && "$bin" "${base[@]}" --out d.h5 > /dev/null 2>&1) &&
  (cd "$work" && "$bin" "${base[@]}" --out d.h5 > /dev/null 2>&1) &&
  cmp -s "$work/d.h5" "$work/again/d.h5" && ok || bad "same seed and command: files differ"

# SIGINT and SIGTERM while solving: exit 130/143, no output, no temporary file.
for sig in INT TERM; do
  want=$([ "$sig" = INT ] && echo 130 || echo 143)
  out="$work/sig_$sig.h5"
  "$bin" --resolution 257 --samples 500 --seed 2 --device cpu --batch 1 --progress plain \
    --out "$out" > /dev/null 2> "$work/sig_err" &
  pid=$!
  for _ in $(seq 1 200); do  # wait for the temporary file (the run has started)
    ls -A "$work" | grep -q "^\.sig_$sig\.h5\.tmp\." && break
    sleep 0.05
  done
  sleep 0.3
  kill -$sig $pid
  wait $pid
  rc=$?
  leftovers=$(ls -A "$work" | grep "sig_$sig")
  if [ "$rc" -ne "$want" ]; then bad "SIG$sig: exit $rc, expected $want: $(tail -1 "$work/sig_err")"
  elif [ -n "$leftovers" ]; then bad "SIG$sig left $leftovers"
  elif ! tail -1 "$work/sig_err" | grep -q "stopped by SIG$sig after .* samples; no output written"; then
    bad "SIG$sig: $(tail -1 "$work/sig_err")"
  else ok; fi
done

# --problem poisson3d: a 16^3 set, split, then one epoch of a small 3D model on it
# with the shipped config and --set overrides (fno_train lives beside fno_datagen).
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
train=$(dirname "$bin")/fno_train
if "$bin" --problem poisson3d --resolution 16 --samples 12 --test-samples 4 --seed 0 --device cpu \
     --progress plain --out "$work/p3.h5" > "$work/out" 2> "$work/err" &&
   grep -q "wrote $work/p3_train.h5" "$work/out" && grep -q "wrote $work/p3_test.h5" "$work/out" &&
   grep -q "12 samples at 16x16x16, seed 0 -> $work/p3_train.h5 $work/p3_test.h5" "$work/err" &&
   ! grep -q "cg_iterations" "$work/out"; then ok; else bad "poisson3d run: $(cat "$work/out" "$work/err")"; fi
if [ ! -x "$train" ]; then
  bad "no fno_train beside fno_datagen ($train)"
elif "$train" --config "$src/configs/poisson3d.yaml" --out "$work/run3d" \
     --set "data.train_file=$work/p3_train.h5" --set data.n_train=8 --set data.batch_size=4 \
     --set "data.test=[{file: $work/p3_test.h5, name: '16', n_samples: 4, batch_size: 4}]" \
     --set "model.n_modes=[4, 4, 4]" --set model.hidden_channels=8 --set model.n_layers=2 \
     --set training.epochs=1 --set device.name=cpu --set output.progress=none \
     > "$work/train_out" 2> "$work/train_err" &&
   [ "$(wc -l < "$work/run3d/metrics.jsonl")" -eq 1 ] && grep -q '"16_l2"' "$work/run3d/metrics.jsonl" &&
   [ -s "$work/run3d/predictions.h5" ] && [ -s "$work/run3d/summary.json" ]; then ok
else bad "fno_train on the poisson3d set: $(tail -3 "$work/train_err") $(ls "$work/run3d" 2>&1)"; fi

finish "fno_datagen CLI"
