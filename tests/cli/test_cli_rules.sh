#!/usr/bin/env bash
# What every program promises on its command line, over every option it
# applies to: a refused number says what is allowed in a few words (one short
# line naming the option, exit 2); a failed write to stdout is an error (exit
# 3, one line), never a silent exit 0.
#   test_cli_rules.sh FNO_TRAIN FNO_BENCH FNO_DATAGEN FNO_SMOKE SOURCE_DIR WORK_DIR
set -u
train=$1 bench=$2 datagen=$3 smoke=$4 src=$5 work=$6
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
small=$src/tests/cli/small.yaml

# readable PROGRAM PATTERN ARGS...: exit 2, one line matching PATTERN, at most 120
# characters besides the paths of this test.
readable() {
  bin=$1
  local pattern=$2 length
  shift 2
  expect 2 "$pattern" -- "$@"
  length=$(sed -e "s|$src||g" -e "s|$work||g" "$work/err" | wc -c)
  [ "$length" -le 120 ] && ok || bad "$(basename "$bin") $*: a $length-character line: $(cat "$work/err")"
}

# Integer options: zero, a negative, a word, and a value past 64 bits, each
# refused in the words of its range.
for opt in --resolutions --batches --steps --chunks --grid-step --grid-max; do
  for v in 0 -3 x 99999999999999999999; do
    readable "$bench" "$opt: must be a positive integer.*, got '$v'" "$opt" "$v" --dry-run
  done
done
for opt in --time-length --warmup --prefetch-depth --min-bytes; do
  for v in -1 x 1.5; do
    readable "$bench" "$opt: must be a non-negative integer, got '$v'" "$opt" "$v" --dry-run
  done
done
for v in 0 1048577; do
  readable "$bench" "--micro-batches: must be an integer between 1 and 1048576, got '$v'" --micro-batches "$v" --dry-run
done
readable "$bench" "--resolutions: must be a positive integer, got '0'" --resolutions 64,0,128 --dry-run
for opt in --resolution --samples --test-samples --subsample --batch --stop-after-samples --seed --grf-modes; do
  # (the required options but the one under test: CLI11 refuses an option given twice)
  args=()
  for req in --resolution=17 --samples=2 --seed=1; do [ "${req%%=*}" = "$opt" ] || args+=("$req"); done
  for v in -1 x 0x10; do
    readable "$datagen" "$opt: must be a non-negative integer, got '$v'" "${args[@]}" --out "$work/d.h5" "$opt" "$v"
  done
done
readable "$datagen" "--seed: must be a non-negative integer (at most 2^64 - 1), got '99999999999999999999'" \
  --resolution 17 --samples 2 --out "$work/d.h5" --seed 99999999999999999999
readable "$smoke" "--resolution: must be an integer between 4 and 8192, got '2'" --resolution 2
readable "$smoke" "--batch: must be an integer between 1 and 4096, got '0'" --batch 0
readable "$smoke" "--steps: must be an integer between 1 and 100000, got '-1'" --steps -1
# fno_train's numbers are config keys: the same few words, with the bound written out.
readable "$train" "data.batch_size: expected an integer in \[1, 1000000000\], got 0" --config "$small" --set data.batch_size=0 --dry-run --out "$work/t"
readable "$train" "training.epochs: expected an integer in \[1, 1000000000\], got 10000000000" --config "$small" --set training.epochs=10000000000 --dry-run --out "$work/t"
readable "$train" "optimizer.lr: expected a number > 0, got 0" --config "$small" --set optimizer.lr=0 --dry-run --out "$work/t"
[ ! -e "$work/d.h5" ] && [ ! -e "$work/t" ] && ok || bad "a refused command wrote files: $(ls "$work")"

# stdout on a full device: exit 3 and one line, for every program and every command that prints.
if [ -w /dev/full ]; then
  full() {
    bin=$1
    shift
    "$bin" "$@" > /dev/full 2> "$work/err"
    local rc=$?
    if [ "$rc" -eq 3 ] && [ "$(wc -l < "$work/err" | tr -d ' ')" -ge 1 ] &&
       tail -1 "$work/err" | grep -q "^$(basename "$bin"): stdout: write failed"; then ok
    else bad "$(basename "$bin") $* > /dev/full: exit $rc: $(cat "$work/err")"; fi
  }
  full "$train" --print-schema
  full "$train" --help
  full "$train" --config "$small" --dry-run --out "$work/full_dry"
  full "$bench" --help
  full "$bench" --dry-run
  full "$datagen" --help
  full "$datagen" --resolution 9 --samples 2 --seed 1 --device cpu --progress none --out "$work/full.h5"
  full "$datagen" --resolution 9 --samples 2 --seed 1 --device cpu --progress none --inputs-only --out "$work/full_in.h5"
  full "$smoke" --help
  full "$smoke" --device cpu --resolution 8 --batch 1 --steps 1
else
  echo "skipped: /dev/full is not writable here"
fi

finish "CLI rules"
