#!/usr/bin/env bash
# Resolution study of the FNO paper's Darcy setting (configs/darcy_paper_s*.yaml):
# for each s, generate 1200 samples (1000 train, 200 test) at 421 x 421 on the
# GPU and keep every k-th node (s = 420 / k + 1, as the paper subsampled its 421
# data), train the paper's configuration with fno_train, and print the final
# test relative L2 error per resolution with the generation and training times.
#
#   bench/datagen_study.sh OUT_DIR [S ...]      (default S: 85 141)
#
# Runs from the repository root with the build in $FNO_BUILD_DIR (default
# build/). The data go to a scratch directory ($TMPDIR) that is removed at the
# end; OUT_DIR keeps only small files: per resolution the generator's and the
# trainer's logs, config.yaml, metrics.jsonl and summary.json, and results.tsv.
# Environment: EPOCHS (default 500, the paper's), SEED (default 0), DEVICE
# (default cuda), KEEP_DATA=1 keeps the generated files in OUT_DIR/data;
# N_TRAIN, N_TEST (default 1000, 200) only to try the script on a small case.
set -euo pipefail

out=${1:?usage: bench/datagen_study.sh OUT_DIR [S ...]}
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(85 141)
epochs=${EPOCHS:-500}
seed=${SEED:-0}
device=${DEVICE:-cuda}
n_train=${N_TRAIN:-1000}
n_test=${N_TEST:-200}
build=${FNO_BUILD_DIR:-build}
datagen=$build/apps/fno_datagen
train=$build/apps/fno_train
for b in "$datagen" "$train"; do
  [ -x "$b" ] || { echo "datagen_study: $b is missing (build it first)" >&2; exit 2; }
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/datagen_study.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
results=$out/results.tsv
printf 's\tsubsample\tdatagen_s\ttrain_s\ttest_l2\ttest_h1\n' > "$results"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

for s in "${sizes[@]}"; do
  if [ $(((420) % (s - 1))) -ne 0 ]; then
    echo "datagen_study: s = $s does not divide 421 - 1 = 420 into whole steps" >&2
    exit 2
  fi
  k=$((420 / (s - 1)))
  config=configs/darcy_paper_s$s.yaml
  [ -f "$config" ] || { echo "datagen_study: no $config" >&2; exit 2; }
  dir=$out/s$s
  mkdir -p "$dir"

  # 1. Data: 1200 samples at 421^2, every k-th node kept.
  t0=$(now)
  "$datagen" --resolution 421 --subsample "$k" --samples $((n_train + n_test)) --test-samples "$n_test" \
    --seed "$seed" \
    --device "$device" --progress plain --out "$scratch/darcy_s$s.h5" \
    > "$dir/datagen.out" 2> "$dir/datagen.log"
  t1=$(now)
  gen_s=$(elapsed "$t0" "$t1")
  echo "s=$s: generated $((n_train + n_test)) samples at 421^2 (kept every $k-th node) in ${gen_s}s"

  # 2. Training with the paper's configuration.
  run=$scratch/run_s$s
  t0=$(now)
  "$train" --config "$config" --out "$run" \
    --set "data.train_file=$scratch/darcy_s${s}_train.h5" \
    --set "data.n_train=$n_train" \
    --set "data.test=[{file: $scratch/darcy_s${s}_test.h5, name: '$s', n_samples: $n_test, batch_size: 20}]" \
    --set "training.epochs=$epochs" --set output.progress=plain \
    > "$dir/train.out" 2> "$dir/train.log"
  t1=$(now)
  train_s=$(elapsed "$t0" "$t1")
  cp "$run/config.yaml" "$run/metrics.jsonl" "$run/summary.json" "$dir/"
  l2=$(awk -v k="${s}_l2" '$1 == k { print $2 }' "$dir/train.out")
  h1=$(awk -v k="${s}_h1" '$1 == k { print $2 }' "$dir/train.out")
  echo "s=$s: trained $epochs epochs in ${train_s}s, test relative L2 $l2 (H1 $h1)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$k" "$gen_s" "$train_s" "$l2" "$h1" >> "$results"

  if [ "${KEEP_DATA:-0}" = 1 ]; then
    mkdir -p "$out/data" && mv "$scratch"/darcy_s"$s"_*.h5 "$out/data/"
  else
    rm -f "$scratch"/darcy_s"$s"_*.h5
  fi
  rm -rf "$run"
done

echo
column -t -s $'\t' "$results" 2> /dev/null || cat "$results"
