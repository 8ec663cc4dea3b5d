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
expect 2 "--seed: must be a non-negative integer, got '-1'" -- --resolution 64 --samples 4 --seed -1 --out "$work/d.h5"
expect 2 "--seed: must be a non-negative integer (at most 2^64 - 1), got '99999999999999999999'" -- --resolution 64 --samples 4 --seed 99999999999999999999 --out "$work/d.h5"
expect 2 "--seed: must be a non-negative integer, got '0x10'" -- --resolution 64 --samples 4 --seed 0x10 --out "$work/d.h5"
expect 2 "samples must be <= 1000000000, got 4503599627370496" -- --resolution 64 --samples 4503599627370496 --seed 1 --out "$work/d.h5"
expect 2 "batch_size must be <= 1000000000, got 9223372036854775807" -- "${base[@]}" --batch 9223372036854775807 --out "$work/d.h5"
expect 2 "out: '$work' is a directory" -- "${base[@]}" --out "$work"
expect 3 "cannot create a temporary file" -- "${base[@]}" --out "$work/no/such/dir/d.h5"
p3=(--problem poisson3d --samples 4 --seed 1 --device cpu --progress none)
expect 2 "problem: nope not in" -- --problem nope --resolution 16 --samples 4 --seed 1 --out "$work/p.h5"
expect 2 "resolution must be >= 4, got 3" -- "${p3[@]}" --resolution 3 --out "$work/p.h5"
expect 2 "resolution must be <= 1024, got 2048" -- "${p3[@]}" --resolution 2048 --out "$work/p.h5"
expect 2 "subsample 3 does not divide resolution = 16" -- "${p3[@]}" --resolution 16 --subsample 3 --out "$work/p.h5"
expect 2 "tolerance applies to --problem darcy only" -- "${p3[@]}" --resolution 16 --tolerance 1e-8 --out "$work/p.h5"
expect 2 "test_samples must be in \[0, samples - 1\]" -- "${p3[@]}" --resolution 16 --test-samples 4 --out "$work/p.h5"
# (CLI11 refuses an option given twice: the variants below add what ns0 leaves out)
ns0=(--problem ns --samples 2 --seed 1 --device cpu --t-final 0.2 --dt 0.01)
ns=("${ns0[@]}" --resolution 16 --record-every 0.1 --progress none)
expect 2 "viscosity must be > 0, got 0" -- "${ns[@]}" --viscosity 0 --out "$work/n.h5"
expect 2 "viscosity must be > 0, got -0.001" -- "${ns[@]}" --viscosity -1e-3 --out "$work/n.h5"
expect 2 "record_every (0.015) must be a whole number of steps of dt (0.01)" -- "${ns0[@]}" --resolution 16 --progress none --record-every 0.015 --out "$work/n.h5"
expect 2 "resolution must be even and in \[8, 4096\], got 15" -- "${ns0[@]}" --record-every 0.1 --progress none --resolution 15 --out "$work/n.h5"
expect 2 "forcing: kolmogorov not in" -- "${ns[@]}" --forcing kolmogorov --out "$work/n.h5"
expect 2 "--viscosity applies to --problem ns only" -- "${base[@]}" --viscosity 1e-3 --out "$work/d.h5"
expect 2 "--precision applies to --problem ns only" -- "${base[@]}" --precision float32 --out "$work/d.h5"
expect 2 "--precision: float16 not in {float64,float32}" -- "${ns[@]}" --precision float16 --out "$work/n.h5"
expect 2 "initial: " -- "${ns[@]}" --initial "$work/no_such.h5" --out "$work/n.h5"
[ -z "$(ls -A "$work" | grep -v '^out$\|^err$\|^help$')" ] && ok || bad "a refused run left files: $(ls -A "$work")"

# Integers are decimal: "010" is ten (CLI11 alone would read octal 8).
"$bin" --resolution 17 --samples 010 --seed 1 --device cpu --progress none --out "$work/ten.h5" > "$work/out" 2>&1 &&
  grep -qx "samples 10" "$work/out" && ok || bad "--samples 010: $(cat "$work/out")"
rm -f "$work/ten.h5"

# The 64x64 run, twice: exit 0, the same bytes.
if "$bin" "${base[@]}" --out "$work/d.h5" > "$work/out" 2> "$work/err" &&
   grep -q "wrote $work/d.h5" "$work/out" && [ -s "$work/d.h5" ]; then ok; else bad "64x64 run: $(cat "$work/err")"; fi
"$bin" "${base[@]}" --out "$work/d2.h5" > /dev/null 2>&1 || bad "second 64x64 run"
# Nothing is written over: a second run into d.h5 is refused before any work, the file kept;
# so is a split whose test file alone exists.
before=$(md5sum < "$work/d.h5")
expect 2 "out: '$work/d.h5' exists; fno_datagen writes over no file: move it away or choose another --out" -- "${base[@]}" --out "$work/d.h5"
[ "$(md5sum < "$work/d.h5")" = "$before" ] && ok || bad "a refused run changed d.h5"
: > "$work/split_test.h5"
expect 2 "out: '$work/split_test.h5' exists" -- "${base[@]}" --test-samples 1 --out "$work/split.h5"
[ ! -e "$work/split_train.h5" ] && [ ! -s "$work/split_test.h5" ] && ok || bad "a refused split wrote files"
expect 2 "out: '$work/split_test.h5' exists" -- "${base[@]}" --test-samples 1 --out "$work/split.h5" --resume
[ ! -e "$work/split.h5.partial" ] && ok || bad "a refused --resume made split.h5.partial"
rm -f "$work/split_test.h5"
# The command line is an attribute: the same one in another directory gives the same bytes.
mkdir -p "$work/again" && (cd "$work/again" && "$bin" "${base[@]}" --out d.h5 > /dev/null 2>&1) &&
  rm -f "$work/d.h5" && (cd "$work" && "$bin" "${base[@]}" --out d.h5 > /dev/null 2>&1) &&
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

# --problem ns: a small run (datasets a and u), an initial file of the wrong shape (exit 2),
# and a run that blows up (exit 3, naming the step, no file).
if "$bin" "${ns0[@]}" --resolution 16 --record-every 0.1 --viscosity 1e-2 --subsample 2 --progress plain --out "$work/n.h5" \
     > "$work/out" 2> "$work/err" && grep -q "wrote $work/n.h5" "$work/out" &&
   grep -q "max_abs_vorticity" "$work/out" &&
   grep -q "2 samples at 16x16 (stored 8x8), 2 records, seed 1 -> $work/n.h5" "$work/err" &&
   grep -q "records" "$work/err"; then ok; else bad "ns run: $(cat "$work/out" "$work/err")"; fi
py=${FNO_PYTHON:-python3}
if "$py" -c 'import h5py' 2> /dev/null; then
  "$py" - "$work" << 'EOF' && ok || bad "ns files"
import sys, h5py, numpy as np
work = sys.argv[1]
with h5py.File(work + "/n.h5") as f:
    assert f["a"].shape == (2, 8, 8) and f["u"].shape == (2, 8, 8, 2), (f["a"].shape, f["u"].shape)
    assert f["u"].dtype == np.float32 and f.attrs["records"] == 2 and f.attrs["record_every"] == 0.1
with h5py.File(work + "/w0_bad.h5", "w") as g:
    g["w0"] = np.zeros((3, 16, 16), np.float32)  # the wrong grid for --resolution 32
x = np.arange(16) / 16.0
big = 1e3 * np.cos(2 * np.pi * x)[:, None] * np.cos(4 * np.pi * x)[None, :] + 1e3 * np.sin(2 * np.pi * x)[:, None]
with h5py.File(work + "/w0_big.h5", "w") as g:
    g["w0"] = big[None].astype(np.float32)
EOF
  expect 2 "holds w0 of shape \[16, 16\] for 3 samples; expected (2, 32, 32)" -- "${ns0[@]}" --record-every 0.1 --progress none --resolution 32 --initial "$work/w0_bad.h5" --out "$work/n2.h5"
  expect 3 "the vorticity is not finite after step [0-9]* (t = .*): the run blew up; try a smaller --dt" -- \
    --problem ns --resolution 16 --samples 1 --seed 1 --device cpu --progress none --viscosity 1e-5 \
    --dt 0.5 --t-final 100 --record-every 100 --forcing none --initial "$work/w0_big.h5" --out "$work/blown.h5"
  [ -z "$(ls "$work" | grep 'blown')" ] && ok || bad "a blown-up run left files: $(ls "$work")"
fi

# --resume: a run stopped after k samples (--stop-after-samples, then SIGTERM), then resumed,
# writes the bytes of one run, for every problem; other settings, a foreign or damaged
# directory of kept samples, or --resume with an output and nothing kept: one line, files kept.
nsr0=(--problem ns --resolution 16 --test-samples 2 --seed 3 --device cpu --dt 0.01
  --t-final 0.3 --record-every 0.1 --subsample 2 --progress none)
nsr=("${nsr0[@]}" --samples 5)
dar=(--resolution 17 --subsample 2 --samples 7 --test-samples 3 --seed 5 --device cpu --batch 2 --progress none)
p3r=(--problem poisson3d --resolution 8 --samples 5 --seed 5 --device cpu --progress none)
for prob in ns darcy poisson3d; do
  case $prob in
    ns) args=("${nsr[@]}") files="r_train.h5 r_test.h5" ;;
    darcy) args=("${dar[@]}") files="r_train.h5 r_test.h5" ;;
    poisson3d) args=("${p3r[@]}") files="r.h5" ;;
  esac
  rm -rf "$work/one" "$work/res" && mkdir -p "$work/one" "$work/res"
  (cd "$work/one" && "$bin" "${args[@]}" --out r.h5 > /dev/null 2>&1) || bad "$prob: one run"
  (cd "$work/res" && "$bin" "${args[@]}" --out r.h5 --resume --stop-after-samples 2 > out 2> err)
  rc=$?
  if [ "$rc" -eq 4 ] && [ "$(wc -l < "$work/res/err")" -eq 1 ] &&
     grep -q "stopped at --stop-after-samples: [2-4] of [57] samples done, kept in 'r.h5.partial'; run the same command with --resume to go on" "$work/res/err" &&
     [ ! -e "$work/res/r.h5" ] && [ ! -e "$work/res/r_train.h5" ] && [ -n "$(ls "$work/res/r.h5.partial")" ]
  then ok; else bad "$prob --stop-after-samples 2: exit $rc: $(cat "$work/res/err"; ls "$work/res")"; fi
  (cd "$work/res" && "$bin" "${args[@]}" --resume --stop-after-samples 4 --out r.h5 > /dev/null 2>&1)
  [ $? -eq 4 ] && ok || bad "$prob --stop-after-samples 4"
  if (cd "$work/res" && "$bin" "${args[@]}" --out r.h5 --resume > out 2> err) && [ ! -e "$work/res/r.h5.partial" ]; then
    same=1
    for f in $files; do cmp -s "$work/one/$f" "$work/res/$f" || same=0; done
    [ $same -eq 1 ] && ok || bad "$prob: resumed files differ from one run's"
  else bad "$prob resumed run: $(cat "$work/res/err"; ls -A "$work/res")"; fi
  # Three workers (--worker K/3, out of order), then the run that writes the
  # files: one run's bytes; a worker writes no file and says what is kept.
  rm -rf "$work/res" && mkdir -p "$work/res"
  for k in 1 0 2; do
    (cd "$work/res" && "$bin" "${args[@]}" --out r.h5 --resume --worker $k/3 > "out$k" 2> err) ||
      bad "$prob worker $k/3: $(cat "$work/res/err")"
  done
  # A worker's progress counts its own batches: its last line says 100%.
  rm -rf "$work/res0" && mkdir -p "$work/res0"
  (cd "$work/res0" && "$bin" "${args[@]/none/plain}" --out r.h5 --resume --worker 0/3 > out 2> err)
  if grep -q "^fno_datagen: \([0-9]*\)/\1 .*(100%)" "$work/res0/err" &&
     ! grep -q "/[0-9]* .*(100%)" <(grep -v "^fno_datagen: \([0-9]*\)/\1 " "$work/res0/err"); then ok
  else bad "$prob worker 0/3's progress: $(cat "$work/res0/err")"; fi
  if grep -q "^worker 2/3: its batches are kept; [57] of [57] samples kept in r.h5.partial; the same command without --worker writes the output once all workers are done$" "$work/res/out2" &&
     grep -q "^worker 1/3: its batches are kept; [1-3] of [57] samples kept" "$work/res/out1" &&
     [ ! -e "$work/res/r.h5" ] && [ ! -e "$work/res/r_train.h5" ]; then ok
  else bad "$prob workers: $(cat "$work/res/out"*; ls "$work/res")"; fi
  if (cd "$work/res" && "$bin" "${args[@]}" --out r.h5 --resume > out 2> err) &&
     [ ! -e "$work/res/r.h5.partial" ]; then
    same=1
    for f in $files; do cmp -s "$work/one/$f" "$work/res/$f" || same=0; done
    [ $same -eq 1 ] && ok || bad "$prob: the workers' files differ from one run's"
  else bad "$prob after the workers: $(cat "$work/res/err"; ls -A "$work/res")"; fi
done

# Two workers at once (as on two GPUs), then the run that writes the files: one run's bytes.
rm -rf "$work/res" "$work/one" && mkdir -p "$work/res" "$work/one"
(cd "$work/one" && "$bin" "${nsr[@]}" --batch 1 --out r.h5 > /dev/null 2>&1) || bad "ns: one run"
(cd "$work/res" && exec "$bin" "${nsr[@]}" --batch 1 --out r.h5 --resume --worker 0/2 > out0 2> err0) &
pid0=$!
(cd "$work/res" && exec "$bin" "${nsr[@]}" --batch 1 --out r.h5 --resume --worker 1/2 > out1 2> err1) &
pid1=$!
wait $pid0; rc0=$?
wait $pid1; rc1=$?
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && (cd "$work/res" && "$bin" "${nsr[@]}" --batch 1 --out r.h5 --resume > out 2> err) &&
   cmp -s "$work/one/r_train.h5" "$work/res/r_train.h5" && cmp -s "$work/one/r_test.h5" "$work/res/r_test.h5"
then ok; else bad "two workers at once: exits $rc0 $rc1: $(cat "$work/res/err"*)"; fi

# SIGTERM mid-run with --resume: exit 143, the finished samples kept; resumed, one run's bytes.
rm -rf "$work/res" && mkdir -p "$work/res"
slow=(--problem ns --resolution 32 --samples 6 --seed 4 --device cpu --dt 0.002 --t-final 0.4
  --record-every 0.2 --subsample 4 --progress none)
(cd "$work/one" && rm -f r.h5 && "$bin" "${slow[@]}" --out r.h5 > /dev/null 2>&1) || bad "slow one run"
(cd "$work/res" && exec "$bin" "${slow[@]}" --resume --out r.h5 > out 2> err) &
pid=$!
for _ in $(seq 1 400); do  # wait for the first kept sample
  [ -n "$(ls "$work/res/r.h5.partial" 2> /dev/null | grep '^samples_')" ] && break
  sleep 0.05
done
kill -TERM $pid
wait $pid
rc=$?
if [ "$rc" -eq 143 ] && [ "$(wc -l < "$work/res/err")" -eq 1 ] &&
   grep -q "stopped by SIGTERM: [0-9] of 6 samples done, kept in 'r.h5.partial'; run the same command with --resume to go on" "$work/res/err" &&
   [ ! -e "$work/res/r.h5" ]; then ok; else bad "SIGTERM with --resume: exit $rc: $(cat "$work/res/err")"; fi
(cd "$work/res" && "$bin" "${slow[@]}" --resume --out r.h5 > /dev/null 2>&1) && cmp -s "$work/one/r.h5" "$work/res/r.h5" &&
  [ ! -e "$work/res/r.h5.partial" ] && ok || bad "resumed after SIGTERM: files differ or r.h5.partial left"

# Bad input with --resume: one line, nothing overwritten or lost.
rm -rf "$work/res" && mkdir -p "$work/res"
(cd "$work/res" && "$bin" "${nsr[@]}" --out r.h5 --resume --stop-after-samples 2 > /dev/null 2>&1)
kept=$(cd "$work/res/r.h5.partial" && md5sum samples_* | md5sum)
cd "$work/res"
expect 2 "resume: the samples kept in 'r.h5.partial' were made with viscosity 0.001, this run has viscosity 0.01; go on with the same settings, or remove 'r.h5.partial' to start again" -- \
  "${nsr[@]}" --viscosity 1e-2 --out r.h5 --resume
expect 2 "were made with samples 5, this run has samples 6" -- "${nsr0[@]}" --samples 6 --out r.h5 --resume
expect 2 "were made with precision float64, this run has precision float32" -- "${nsr[@]}" --precision float32 --out r.h5 --resume
expect 2 "were made with problem ns, this run has problem darcy" -- --resolution 17 --samples 5 --test-samples 2 --seed 3 --device cpu --progress none --out r.h5 --resume
expect 2 "--stop-after-samples needs --resume" -- "${nsr[@]}" --out r.h5 --stop-after-samples 2
[ "$(cd r.h5.partial && md5sum samples_* | md5sum)" = "$kept" ] && ok || bad "a refused resume changed the kept samples"
cp r.h5.partial/samples_0000000000_0000000001.h5 "$work/keep.h5"
echo junk > r.h5.partial/notes.txt
expect 3 "r.h5.partial: holds 'notes.txt', which fno_datagen --resume did not write; move it away" -- "${nsr[@]}" --out r.h5 --resume
rm r.h5.partial/notes.txt
head -c 3000 "$work/keep.h5" > r.h5.partial/samples_0000000000_0000000001.h5
expect 3 "r.h5.partial/samples_0000000000_0000000001.h5: " -- "${nsr[@]}" --out r.h5 --resume
rm r.h5.partial/samples_0000000000_0000000001.h5
"$bin" "${base[@]}" --out r.h5.partial/samples_0000000000_0000000001.h5 > /dev/null 2>&1
expect 3 "samples_0000000000_0000000001.h5: not a batch kept by fno_datagen --resume" -- "${nsr[@]}" --out r.h5 --resume
cp "$work/keep.h5" r.h5.partial/samples_0000000000_0000000001.h5
mv r.h5.partial/samples_0000000001_0000000002.h5 r.h5.partial/samples_0000000001_0000000003.h5
expect 3 "samples_0000000001_0000000003.h5: holds samples \[1, 2), not \[1, 3); the file is damaged" -- "${nsr[@]}" --out r.h5 --resume
mv r.h5.partial/samples_0000000001_0000000003.h5 r.h5.partial/samples_0000000002_0000000003.h5
expect 3 "samples_0000000002_0000000003.h5: holds samples \[1, 2), not \[2, 3); the file is damaged" -- "${nsr[@]}" --out r.h5 --resume
mv r.h5.partial/samples_0000000002_0000000003.h5 r.h5.partial/samples_0000000001_0000000002.h5
# Kept batches that overlap (a batch of 2 beside batches of 1), or end past the run's samples.
mkdir "$work/b2" && (cd "$work/b2" && "$bin" "${nsr[@]}" --batch 2 --out r.h5 --resume --stop-after-samples 2 > /dev/null 2>&1)
cp "$work/b2/r.h5.partial/samples_0000000000_0000000002.h5" r.h5.partial/
expect 3 "samples_0000000000_0000000002.h5: samples \[0, 2) overlap the kept ones before, up to 1; the kept samples are damaged: remove 'r.h5.partial' to start again" -- "${nsr[@]}" --out r.h5 --resume
rm r.h5.partial/samples_0000000000_0000000002.h5
mv r.h5.partial/samples_0000000001_0000000002.h5 r.h5.partial/samples_0000000004_0000000006.h5
expect 3 "samples_0000000004_0000000006.h5: samples \[4, 6) are not within the run's 5 samples" -- "${nsr[@]}" --out r.h5 --resume
expect 2 "--worker 2/2: expected K/N with 0 <= K < N, e.g. 0/2" -- "${nsr[@]}" --out r.h5 --resume --worker 2/2
expect 2 "--worker needs --resume" -- "${nsr[@]}" --out r.h5 --worker 0/2
rm -rf r.h5.partial
: > r_train.h5
expect 2 "out: 'r_train.h5' exists; fno_datagen writes over no file" -- "${nsr[@]}" --out r.h5 --resume
[ ! -s r_train.h5 ] && [ ! -e r.h5.partial ] && ok || bad "--resume with an output and nothing kept changed files: $(ls -A)"
rm r_train.h5
echo notadir > r.h5.partial
expect 3 "r.h5.partial: not a directory of samples kept by fno_datagen --resume" -- "${nsr[@]}" --out r.h5 --resume
cd - > /dev/null

# Derived counts are checked before any work: a dt so small that t_final / dt
# passes 2^53 steps is one line naming --dt, exit 2, and nothing written
# (with --resume, no OUT.partial/ either).
rm -rf "$work/tiny" && mkdir -p "$work/tiny"
for extra in "" --resume; do
  (cd "$work/tiny" && "$bin" "${nsr0[@]/0.01/1e-300}" --samples 5 --out r.h5 $extra > out 2> err)
  rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l < "$work/tiny/err")" -eq 1 ] &&
     grep -q "^fno_datagen: --dt 1e-300 makes t_final / dt = 3e+299 time steps per sample, over 2^53: a larger --dt or a smaller --t-final$" "$work/tiny/err" &&
     [ -z "$(ls "$work/tiny" | grep -v '^out$\|^err$')" ]; then ok
  else bad "--dt 1e-300 $extra: exit $rc: $(cat "$work/tiny/err"; ls "$work/tiny")"; fi
done

# --resume pins --initial's contents, not only its path: the same file with
# other fields (same shape) is refused in one line naming the option and the
# file, the kept samples untouched; restored, the run ends with one run's bytes.
if "$py" -c 'import h5py' 2> /dev/null; then
  rm -rf "$work/init" && mkdir -p "$work/init/one" "$work/init/res"
  "$py" - "$work/init" << 'EOF' || bad "making the initial files"
import sys, h5py, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
for name in ("w0_a.h5", "w0_b.h5"):
    with h5py.File(d + "/" + name, "w") as f:
        f["w0"] = rng.standard_normal((5, 16, 16)).astype(np.float32)
EOF
  ini=("${nsr[@]}" --batch 1)
  cp "$work/init/w0_a.h5" "$work/init/one/w0.h5"
  (cd "$work/init/one" && "$bin" "${ini[@]}" --initial w0.h5 --out r.h5 > /dev/null 2>&1) || bad "--initial: one run"
  cp "$work/init/w0_a.h5" "$work/init/res/w0.h5"
  cd "$work/init/res"
  "$bin" "${ini[@]}" --initial w0.h5 --out r.h5 --resume --stop-after-samples 2 > /dev/null 2>&1
  [ $? -eq 4 ] && ok || bad "--initial: the first part"
  kept=$(cd r.h5.partial && md5sum samples_* | md5sum)
  cp "$work/init/w0_b.h5" w0.h5
  expect 2 "^fno_datagen: resume: --initial 'w0.h5' changed since the samples kept in 'r.h5.partial' were made (then [0-9]* bytes, fnv1a64 [0-9a-f]*; now [0-9]* bytes, fnv1a64 [0-9a-f]*); restore it, or remove 'r.h5.partial' to start again$" -- \
    "${ini[@]}" --initial w0.h5 --out r.h5 --resume
  [ "$(cd r.h5.partial && md5sum samples_* | md5sum)" = "$kept" ] && [ ! -e r_train.h5 ] && ok ||
    bad "a refused --initial changed the kept samples or wrote files"
  expect 2 "were made with initial w0.h5, this run has initial ../w0_b.h5" -- "${ini[@]}" --initial ../w0_b.h5 --out r.h5 --resume
  cp "$work/init/w0_a.h5" w0.h5
  if "$bin" "${ini[@]}" --initial w0.h5 --out r.h5 --resume > /dev/null 2> err &&
     cmp -s r_train.h5 ../one/r_train.h5 && cmp -s r_test.h5 ../one/r_test.h5; then ok
  else bad "--initial restored: $(cat err)"; fi
  cd - > /dev/null
fi

# --inputs-only: the Darcy coefficient alone, rows of the stored grid as progress;
# the solved run's coeff, byte for byte, chunked by rows, no sol, the attribute
# saying so; options that do not apply refused in one line, no file written.
in=(--resolution 33 --samples 2 --seed 4 --device cpu --progress plain)
if "$bin" "${in[@]}" --inputs-only --out "$work/in.h5" > "$work/out" 2> "$work/err" &&
   grep -q "^wrote $work/in.h5$" "$work/out" && grep -q "^grf_modes 33$" "$work/out" &&
   grep -q "2 samples at 33x33, coefficients only, seed 4 -> $work/in.h5" "$work/err" &&
   grep -q "66/66 rows (100%)" "$work/err"; then ok
else bad "--inputs-only run: $(cat "$work/out" "$work/err")"; fi
"$bin" "${in[@]}" --out "$work/solved.h5" > /dev/null 2>&1 || bad "the solved run beside --inputs-only"
if "$py" -c 'import h5py' 2> /dev/null; then
  "$py" - "$work" << 'EOF' && ok || bad "--inputs-only file"
import sys, h5py, numpy as np
work = sys.argv[1]
with h5py.File(work + "/in.h5") as f, h5py.File(work + "/solved.h5") as g:
    assert "sol" not in f and f["coeff"].chunks == (1, 33, 33), (list(f), f["coeff"].chunks)
    assert f["coeff"].compression is None
    assert np.array_equal(f["coeff"][:], g["coeff"][:])
    assert "no solution u was computed" in f.attrs["solution"] and f.attrs["inputs_only"] == 1
EOF
fi
expect 2 "--inputs-only applies to --problem darcy only" -- "${p3[@]}" --resolution 8 --inputs-only --out "$work/x.h5"
expect 2 "--grf-modes applies to --inputs-only only" -- "${base[@]}" --grf-modes 4 --out "$work/x.h5"
expect 2 "--tolerance applies to the solve, not to --inputs-only" -- "${base[@]}" --inputs-only --tolerance 1e-8 --out "$work/x.h5"
expect 2 "grf_modes must be in \[0, resolution\] = \[0, 64\], got 65" -- "${base[@]}" --inputs-only --grf-modes 65 --out "$work/x.h5"
expect 2 "resolution must be <= 65537 with inputs_only, got 65538" -- "${in[@]/33/65538}" --inputs-only --out "$work/x.h5"
expect 2 "inputs_only is not resumable" -- "${base[@]}" --inputs-only --resume --out "$work/x.h5"
[ -z "$(ls -A "$work" | grep '^x\.h5\|^\.x\.h5')" ] && ok || bad "a refused --inputs-only left files: $(ls -A "$work")"

finish "fno_datagen CLI"
