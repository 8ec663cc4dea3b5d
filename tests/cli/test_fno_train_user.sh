#!/usr/bin/env bash
# fno_train as a newcomer meets it: the nearest key suggested for an unknown one,
# --set paths against the current directory, one line for each setting that does
# less than it may seem (test sets kept, options the policy ignores, byte units,
# offload without CUDA), a stage index past the model's stages, progress lines
# within an epoch when piped, and a resume with nothing left to train.
#   test_fno_train_user.sh FNO_TRAIN SOURCE_DIR WORK_DIR
set -u
bin=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work/sub"
small=$src/tests/cli/small.yaml
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Unknown keys: the nearest known one, in a file and with --set.
printf 'data:\n  train_file: x.pt\ntraining:\n  epoch: 3\n' > "$work/typo.yaml"
expect 2 "typo.yaml:4: training.epoch: unknown key (did you mean training.epochs?)" -- --config "$work/typo.yaml"
expect 2 "training.epoch: unknown key (did you mean training.epochs?)" -- --config "$small" --set training.epoch=3
expect 2 "training.batch_size: unknown key (did you mean data.batch_size?)" -- --config "$small" --set training.batch_size=4

# A stage index past the model's stages (small.yaml: 2 blocks, so 4 stages).
expect 2 "offload.policy: 'blocks:9' names 9 stages, but the model has 4" -- --config "$small" --offload blocks:9

# --set paths resolve against the current directory, the config's against its folder.
(cd "$work" && "$bin" --config "$small" --set data.train_file=sub/missing.pt --out "$work/r0") > /dev/null 2> "$work/err"
rc=$?
[ "$rc" -eq 3 ] && grep -q "^fno_train: $work/sub/missing.pt: cannot open" "$work/err" && ok ||
  bad "--set path not against the current directory: exit $rc: $(cat "$work/err")"

# The training file replaced on the command line, the config's test sets kept: one line.
cp "$src/data/darcy/darcy_train_16.pt" "$work/sub/mine.pt"
(cd "$work" && "$bin" --config "$small" --set data.train_file=sub/mine.pt --dry-run --out "$work/dry") > /dev/null 2> "$work/err" ||
  bad "dry run with --set data.train_file: $(cat "$work/err")"
[ "$(grep -c "data.train_file is set on the command line, but the test sets are still .*small.yaml's (darcy_test_16.pt, darcy_test_32.pt)" "$work/err")" -eq 1 ] && ok ||
  bad "no line about the kept test sets: $(cat "$work/err")"
grep -q "train_file: $work/sub/mine.pt" "$work/dry/config.yaml" && ok || bad "config.yaml lacks the --set path: $(grep train_file "$work/dry/config.yaml")"

# Options the policy ignores, and byte units, each in one line.
"$bin" --config "$small" --gpu-memory-limit 4GB --set offload.compress=bf16 --dry-run --out "$work/dry2" > /dev/null 2> "$work/err" ||
  bad "dry run with --gpu-memory-limit: $(cat "$work/err")"
grep -q "^fno_train: offload.gpu_memory_limit: offload.policy none plans nothing against it" "$work/err" && ok || bad "no line for the ignored budget: $(cat "$work/err")"
grep -q "^fno_train: offload.compress: ignored by offload.policy none" "$work/err" && ok || bad "no line for the ignored compress: $(cat "$work/err")"
grep -q "^fno_train: offload.gpu_memory_limit: '4GB' is 4000000000 bytes = 3.73 GiB (GB = 10^9 bytes, GiB = 2^30)$" "$work/err" && ok ||
  bad "no line for the byte unit: $(cat "$work/err")"

# Offload without CUDA: its own line, and config.yaml records the policy that ran.
"$bin" --config "$small" --dry-run --out "$work/dry3" --offload > /dev/null 2> "$work/err" || bad "dry run with --offload: $(cat "$work/err")"
grep -q "^fno_train: offload.policy all: no CUDA device, so nothing is offloaded; training with offload.policy none (config.yaml records it)$" "$work/err" && ok ||
  bad "no line for offload without CUDA: $(cat "$work/err")"
grep -A1 "^offload:" "$work/dry3/config.yaml" | grep -q "policy: none" && ok || bad "config.yaml records $(grep -A1 '^offload:' "$work/dry3/config.yaml")"

# Progress within an epoch, piped: plain lines with samples/s and the time left.
"$bin" --config "$small" --set training.epochs=1 --set output.progress_every=0.002 --out "$work/progress" > /dev/null 2> "$work/err" ||
  bad "progress run: $(cat "$work/err")"
grep -Eq "^epoch 1/1: batch [0-9]+/8 \([0-9]+%\), [0-9]+ samples/s, [0-9]+s left$" "$work/err" && ok ||
  bad "no progress line within the epoch: $(cat "$work/err")"
grep -q "^epoch 1/1  lr" "$work/err" && ok || bad "no epoch line: $(cat "$work/err")"
# The default (10 s) prints none within a short epoch.
"$bin" --config "$small" --set training.epochs=1 --out "$work/quiet" > /dev/null 2> "$work/err"
! grep -q "samples/s" "$work/err" && ok || bad "progress lines within a short epoch: $(cat "$work/err")"

# A resume with nothing left to train says so.
"$bin" --resume "$work/progress" > "$work/out" 2> "$work/err" || bad "resume of a finished run: $(cat "$work/err")"
grep -q "^fno_train: $work/progress has finished its 1 epochs: nothing left to train" "$work/err" && ok ||
  bad "no line saying nothing is left: $(cat "$work/err")"
[ "$(wc -l < "$work/progress/metrics.jsonl")" -eq 1 ] && ok || bad "the finished run's metrics changed"

finish
