#!/usr/bin/env bash
# fno_train from the outside: exit codes, one-line errors, dry run, and a
# kill -9 at a random moment followed by --resume, which must end with the
# same metrics as an uninterrupted run.
#   test_fno_train.sh FNO_TRAIN SOURCE_DIR WORK_DIR
set -u
bin=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
small=$src/tests/cli/small.yaml
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin" --help > "$work/help" 2>&1 && grep -q -- "--resume" "$work/help" && grep -q -- "--dry-run" "$work/help" && ok || bad "--help"

printf 'model: [1, 2\n' > "$work/malformed.yaml"
printf '' > "$work/empty.yaml"
printf 'model:\n  hidden_channels: 8\n  colour: red\n' > "$work/unknown.yaml"
printf 'garbage bytes, not a tensor file' > "$work/garbage.pt"

expect 2 "unexpected\|not expected\|bogus" -- --config "$small" --bogus
expect 2 "--config FILE is required" --
expect 2 "nope.yaml: cannot read the config file" -- --config "$work/nope.yaml"
expect 2 "cannot read the config file" -- --config "$work"
expect 2 "malformed.yaml:.*malformed YAML" -- --config "$work/malformed.yaml"
expect 2 "empty.yaml: empty config" -- --config "$work/empty.yaml"
expect 2 "unknown.yaml:3: model.colour: unknown key" -- --config "$work/unknown.yaml"
expect 2 "expected section.key=value" -- --config "$small" --set training.epochs
expect 2 "training.epochs: expected an integer in \[1, 1000000000\], got 0" -- --config "$small" --set training.epochs=0
expect 2 "model.n_modes: expected an integer >= 1, got -2" -- --config "$small" --set "model.n_modes=[8, -2]"
expect 2 "unknown value 'warp'" -- --config "$small" --set scheduler.name=warp
expect 3 "garbage.pt: neither a torch.save" -- --config "$small" --set "data.train_file=$work/garbage.pt" --out "$work/r0"
expect 3 "missing.pt: cannot open" -- --config "$small" --set "data.train_file=$work/missing.pt" --out "$work/r0"
expect 3 "regression-libhdf5-segv.h5: the HDF5 library crashed reading this file" -- --config "$small" \
  --set "data.train_file=$src/tests/fuzz/seeds/hdf5/regression-libhdf5-segv.h5" --out "$work/r0"
expect 2 "unknown offload policy 'sometimes'" -- --config "$small" --offload sometimes
expect 2 "bad memory size '12XB'" -- --config "$small" --gpu-memory-limit 12XB
expect 3 "cannot create the run directory" -- --config "$small" --out /proc/fno_cannot_write
expect 2 "not a run directory" -- --resume "$work/nowhere"

# Dry run of the seed config: n_params as neuraloperator counts them.
if "$bin" --config "$src/configs/darcy.yaml" --dry-run --out "$work/dry" > "$work/out" 2> "$work/err" &&
   grep -q '"n_params": 1192801' "$work/dry/summary.json" && [ ! -e "$work/dry/checkpoint_latest.pt" ]; then ok
else bad "dry run: $(cat "$work/err")"; fi

# The experiment overrides a run ran under are recorded in its summary.json;
# an unset one is not.
if FNO_DFT_EXPAND=0 "$bin" --config "$small" --dry-run --out "$work/dry_override" > /dev/null 2> "$work/err" &&
   grep -q '"overrides": {"FNO_DFT_EXPAND": "0"}' "$work/dry_override/summary.json" &&
   ! grep -q '"overrides"' "$work/dry/summary.json"; then ok
else bad "overrides in summary.json: $(cat "$work/dry_override/summary.json" "$work/err" 2> /dev/null)"; fi

# Uninterrupted reference run, then a second run into the same directory is refused.
"$bin" --config "$small" --out "$work/full" > /dev/null 2> "$work/full.err" || bad "reference run failed: $(tail -1 "$work/full.err")"
expect 2 "already holds a run" -- --config "$small" --out "$work/full"

# A dry run writes over no run: --out on a finished run is refused, its files
# untouched; --resume RUN --dry-run checks the resume and writes nothing; a dry
# run's own directory takes another dry run, then a run.
sums() { (cd "$1" && md5sum config.yaml summary.json metrics.jsonl checkpoint_latest.pt 2> /dev/null); }
before=$(sums "$work/full")
expect 2 "$work/full already holds a run; continue it with --resume $work/full (--dry-run checks it) or choose another --out" -- \
  --config "$small" --dry-run --out "$work/full"
if "$bin" --resume "$work/full" --dry-run > "$work/out" 2> "$work/err" &&
   grep -q "^wrote nothing (--resume $work/full --dry-run: its config and data check out)$" "$work/out"; then ok
else bad "--resume --dry-run: $(cat "$work/err")"; fi
[ "$(sums "$work/full")" = "$before" ] && ok || bad "a dry run changed the finished run's files"
"$bin" --config "$small" --dry-run --out "$work/dry2" > /dev/null 2>&1 &&
  "$bin" --config "$small" --dry-run --out "$work/dry2" > /dev/null 2>&1 &&
  "$bin" --config "$small" --set training.epochs=1 --out "$work/dry2" > /dev/null 2> "$work/err" &&
  [ -s "$work/dry2/checkpoint_latest.pt" ] && ok || bad "a dry run's directory: $(cat "$work/err")"
# A run stopped before its first checkpoint is a run too: refused, not replaced.
mkdir -p "$work/early" && cp "$work/full/config.yaml" "$work/early/"
expect 2 "$work/early already holds a run (config.yaml) with no checkpoint to resume from; choose another --out, or move it away" -- \
  --config "$small" --out "$work/early"
cmp -s "$work/full/config.yaml" "$work/early/config.yaml" && ok || bad "a refused run changed config.yaml"

# A resume goes on with the run's data only: a data file changed in place (same
# path, other contents) or another file is refused before anything loads, in
# one line naming the key and the file; restored, the resume goes on.
mkdir -p "$work/in" && cp "$src/data/darcy/darcy_train_16.pt" "$work/in/train.pt"
pin=(--set "data.train_file=$work/in/train.pt" --set training.epochs=2)
"$bin" --config "$small" "${pin[@]}" --out "$work/pinned" > /dev/null 2> "$work/err" || bad "pinned run: $(tail -1 "$work/err")"
grep -q "^data.train_file	$work/in/train.pt	[0-9]* bytes, fnv1a64 [0-9a-f]*$" "$work/pinned/inputs.txt" && ok ||
  bad "inputs.txt: $(cat "$work/pinned/inputs.txt")"
before=$(sums "$work/pinned")
cp "$src/data/darcy/darcy_test_16.pt" "$work/in/train.pt"
expect 2 "^fno_train: resume: data.train_file '$work/in/train.pt' changed since the run $work/pinned began (then [0-9]* bytes, fnv1a64 [0-9a-f]*; now [0-9]* bytes, fnv1a64 [0-9a-f]*); restore it, or start a new run$" -- \
  --resume "$work/pinned" --set training.epochs=3
expect 2 "data.train_file '$work/in/train.pt' changed since" -- --resume "$work/pinned" --dry-run
expect 2 "resume: data.train_file is '$src/data/darcy/darcy_train_16.pt', the run $work/pinned began with '$work/in/train.pt'" -- \
  --resume "$work/pinned" --set "data.train_file=$src/data/darcy/darcy_train_16.pt" --set training.epochs=3
[ "$(sums "$work/pinned")" = "$before" ] && ok || bad "a refused resume changed the run's files"
cp "$src/data/darcy/darcy_train_16.pt" "$work/in/train.pt"
"$bin" --resume "$work/pinned" --set training.epochs=3 > /dev/null 2> "$work/err" &&
  [ "$(wc -l < "$work/pinned/metrics.jsonl")" -eq 3 ] && ok || bad "resume with the data restored: $(tail -1 "$work/err")"

# Derived counts: a batch size or epoch count past the keys' bounds, or a model
# whose spectral weights pass 2^53, is one line naming the key, exit 2, nothing written.
expect 2 "data.batch_size: expected an integer in \[1, 1000000000\], got 9223372036854775807" -- \
  --config "$small" --set data.batch_size=9223372036854775807 --out "$work/big1"
expect 2 "offload.max_prefetch_mib: expected an integer in \[1, 1073741824\], got 17592186044416" -- \
  --config "$small" --set offload.max_prefetch_mib=17592186044416 --out "$work/big2"
expect 2 "model.n_modes: hidden_channels^2 x the modes' product is 1e+20 spectral weights per block, over 2^53: fewer modes or channels" -- \
  --config "$small" --set model.hidden_channels=100000 --set "model.n_modes=[100000, 100000]" --out "$work/big3"
[ ! -e "$work/big1" ] && [ ! -e "$work/big2" ] && [ ! -e "$work/big3" ] && ok || bad "a refused config wrote a run directory"

# kill -9 partway (after a random number of epochs, at a random moment within
# one, once a checkpoint exists), resume, compare with an uninterrupted run of
# the same length. The checkpoint is written after the epoch's metrics line and
# by a writer thread, so the kill waits for the file; the runs are 24 epochs
# long so that a loaded machine still polls before the end. If a run finishes
# first anyway, try again.
long=(--set training.epochs=24)
"$bin" --config "$small" "${long[@]}" --out "$work/full24" > /dev/null 2> "$work/full24.err" || bad "24-epoch reference run failed: $(tail -1 "$work/full24.err")"
interrupted=0
for attempt in 1 2 3 4 5; do
  rm -rf "$work/killed"
  "$bin" --config "$small" "${long[@]}" --out "$work/killed" > /dev/null 2>&1 &
  pid=$!
  want=$((2 + RANDOM % 12))
  [ "$attempt" -gt 2 ] && want=1
  while kill -0 $pid 2> /dev/null; do
    if [ -f "$work/killed/checkpoint_latest.pt" ] && [ -f "$work/killed/metrics.jsonl" ] &&
       [ "$(wc -l < "$work/killed/metrics.jsonl")" -ge "$want" ]; then
      kill -9 $pid 2> /dev/null
      break
    fi
    sleep 0.01
  done
  wait $pid 2> /dev/null
  if [ ! -f "$work/killed/summary.json" ] && [ -f "$work/killed/checkpoint_latest.pt" ]; then
    interrupted=1
    break
  fi
done
[ "$interrupted" -eq 1 ] || bad "could not interrupt a run with kill -9 before it finished"
"$bin" --resume "$work/killed" > /dev/null 2> "$work/resume.err" || bad "resume failed: $(tail -1 "$work/resume.err")"
strip() { sed -E 's/, "seconds": [^,}]*//' "$1"; }
if [ "$(strip "$work/full24/metrics.jsonl")" = "$(strip "$work/killed/metrics.jsonl")" ]; then ok
else bad "metrics after kill -9 + resume differ from the uninterrupted run"; diff <(strip "$work/full24/metrics.jsonl") <(strip "$work/killed/metrics.jsonl"); fi
full_metrics=$(grep -o '"metrics": {[^}]*}' "$work/full24/summary.json")
resumed_metrics=$(grep -o '"metrics": {[^}]*}' "$work/killed/summary.json")
[ -n "$full_metrics" ] && [ "$full_metrics" = "$resumed_metrics" ] && ok || bad "final metrics differ: $full_metrics vs $resumed_metrics"

# SIGTERM mid-run: the current step finishes, a checkpoint is written, exit 143;
# --resume then ends with the uninterrupted run's metrics.
stopped=0
for attempt in 1 2 3 4 5; do
  rm -rf "$work/term"
  "$bin" --config "$small" --out "$work/term" > /dev/null 2> "$work/term.err" &
  pid=$!
  while kill -0 $pid 2> /dev/null; do
    if [ -f "$work/term/metrics.jsonl" ] && [ "$(wc -l < "$work/term/metrics.jsonl")" -ge 1 ]; then
      sleep 0.0$((RANDOM % 10)); kill -TERM $pid 2> /dev/null; break
    fi
    sleep 0.01
  done
  wait $pid; rc=$?
  if [ "$rc" -eq 143 ]; then stopped=1; break; fi
done
if [ "$stopped" -eq 1 ] && grep -q "stopped by SIGTERM" "$work/term.err" && [ -f "$work/term/checkpoint_latest.pt" ]; then ok
else bad "SIGTERM did not stop the run cleanly with exit 143: $(tail -1 "$work/term.err")"; fi
"$bin" --resume "$work/term" > /dev/null 2> "$work/term_resume.err" || bad "resume after SIGTERM failed: $(tail -1 "$work/term_resume.err")"
[ "$(strip "$work/full/metrics.jsonl")" = "$(strip "$work/term/metrics.jsonl")" ] && ok || bad "metrics after SIGTERM + resume differ"

# Mixed precision on the CPU: bf16 and fp16 train the small config to within
# 3% of the fp32 run's metrics; fp16 logs its loss scale and skipped steps and
# resumes with its scaler; state dicts stay fp32 (model.pt has the fp32 size).
expect 2 "--precision: unknown precision 'fp8'" -- --config "$small" --precision fp8
expect 2 "training.precision: unknown value 'int8'" -- --config "$small" --set training.precision=int8
metric() { grep -o "\"$2\": [0-9.e+-]*" "$1/summary.json" | head -1 | awk '{print $2}'; }
for p in bf16 fp16; do
  "$bin" --config "$small" --precision $p --out "$work/$p" > /dev/null 2> "$work/$p.err" || bad "$p run failed: $(tail -1 "$work/$p.err")"
  for m in 16_l2 32_l2; do
    a=$(metric "$work/full" $m) b=$(metric "$work/$p" $m)
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > 0 && b <= 1.03 * a && b >= a / 1.03) }' && ok || bad "$p $m $b vs fp32 $a"
  done
  grep -q '"precision": "'$p'"' "$work/$p/summary.json" && ok || bad "$p: summary.json lacks the precision"
  [ "$(stat -c %s "$work/$p/model.pt")" = "$(stat -c %s "$work/full/model.pt")" ] && ok || bad "$p: model.pt differs in size from fp32's"
done
grep -q '"skipped_steps": 0, "loss_scale": 65536' "$work/fp16/metrics.jsonl" && ok || bad "fp16: metrics.jsonl lacks the loss scale: $(tail -1 "$work/fp16/metrics.jsonl")"
# Resumed, the scale goes on from the checkpoint's (equal to epoch 8's when epoch 9 skips nothing).
scale_of() { sed -n "${1}p" "$work/fp16/metrics.jsonl" | grep -o '"skipped_steps": [0-9]*, "loss_scale": [0-9.e+]*'; }
"$bin" --resume "$work/fp16" --set training.epochs=9 > /dev/null 2> "$work/fp16_resume.err" &&
  [ "$(wc -l < "$work/fp16/metrics.jsonl")" -eq 9 ] &&
  [ "$(scale_of 9 | sed 's/.*loss_scale/loss_scale/')" = "$(scale_of 8 | sed 's/.*loss_scale/loss_scale/')" -o \
    -z "$(scale_of 9 | grep '"skipped_steps": 0')" ] && ok ||
  bad "fp16 resume: $(tail -1 "$work/fp16_resume.err"); $(scale_of 8) then $(scale_of 9)"

# A damaged latest checkpoint: resume warns and falls back to the previous one.
cp -r "$work/full" "$work/damaged"
size=$(stat -c %s "$work/damaged/checkpoint_latest.pt")
printf '\xff\xfe\xfd\xfc' | dd of="$work/damaged/checkpoint_latest.pt" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
if "$bin" --resume "$work/damaged" > /dev/null 2> "$work/damaged.err" && grep -q "warning: .*checkpoint_latest.pt" "$work/damaged.err" &&
   [ "$(strip "$work/full/metrics.jsonl")" = "$(strip "$work/damaged/metrics.jsonl")" ]; then ok
else bad "resume from a damaged latest checkpoint: $(cat "$work/damaged.err")"; fi
rm -f "$work/damaged/checkpoint_previous.pt"
printf '\xff\xfe\xfd\xfc' | dd of="$work/damaged/checkpoint_latest.pt" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
"$bin" --resume "$work/damaged" > /dev/null 2> "$work/damaged2.err"; rc=$?
[ "$rc" -eq 4 ] && grep -q "no usable checkpoint" "$work/damaged2.err" && ok || bad "no usable checkpoint: exit $rc: $(cat "$work/damaged2.err")"

# A full disk while writing a checkpoint (file size limit): a one-line error,
# exit 3, and the files already written are intact.
( trap '' XFSZ; ulimit -f 24; exec "$bin" --config "$small" --out "$work/full_disk" ) > /dev/null 2> "$work/disk.err"; rc=$?
if [ "$rc" -eq 3 ] && grep -q "checkpoint_[a-z]*.pt: write failed: File too large" "$work/disk.err" && [ -s "$work/full_disk/config.yaml" ] &&
   ! ls "$work/full_disk"/.*.tmp.* > /dev/null 2>&1; then ok
else bad "full disk: exit $rc: $(cat "$work/disk.err")"; fi

# A set's samples from `first` (a validation split after the test samples): the mean error of
# samples [0, 4) is the mean of [0, 2)'s and [2, 4)'s; a first past the file is one line.
t16=$src/data/darcy/darcy_test_16.pt
metric() { tail -1 "$work/first/metrics.jsonl" | grep -o "\"$1\": [-0-9.e+]*" | cut -d' ' -f2; }
if "$bin" --config "$small" --out "$work/first" --set training.epochs=1 --set "data.test=[{file: $t16, name: all, n_samples: 4}, {file: $t16, name: lo, n_samples: 2}, {file: $t16, name: hi, first: 2, n_samples: 2}]" > /dev/null 2> "$work/first.err" &&
   awk -v a="$(metric all_l2)" -v l="$(metric lo_l2)" -v h="$(metric hi_l2)" \
     -v A="$(metric all_h1)" -v L="$(metric lo_h1)" -v H="$(metric hi_h1)" 'function d(x) { return x < 0 ? -x : x }
     BEGIN { exit !(a > 0 && d(a - (l + h) / 2) < 1e-6 * a && d(A - (L + H) / 2) < 1e-6 * A && d(l - h) > 1e-9) }'
then ok; else bad "data.test first: $(tail -1 "$work/first.err")"; fi
expect 3 "darcy_test_16.pt: data.test first 5000 is past the file's" -- --config "$small" --out "$work/first_past" \
  --set "data.test=[{file: $t16, first: 5000, n_samples: 2}]"

finish
