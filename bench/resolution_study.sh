#!/usr/bin/env bash
# The resolution study: for each resolution, Darcy data from fno_datagen, then
# one training config for a few epochs three ways: without offload
# (--offload none), with --offload auto (budget: the GPU's free memory), and
# with --offload auto --gpu-memory-limit $SMALL_BUDGET. Per run it records the
# peak GPU memory, the seconds per epoch, the test metrics and the status: ok,
# oom (fno_train's one-line out-of-memory error, exit 4) or error. A failed run
# is a data point; the study goes on.
#
#   bench/resolution_study.sh OUT [RES ...]     (default RES: 128 256 512 1024 2048)
#
# Writes OUT/study.csv and OUT/study.json (one row per run; read by
# notebooks/resolutions.ipynb), OUT/runs/RES_LABEL/ (fno_train's run directory:
# config.yaml, metrics.jsonl, summary.json, stdout.txt, stderr.txt), and
# OUT/data/RES/datagen.log. Without a
# GPU everything runs on the CPU and the offload runs train without offload.
#
# Environment (the defaults fit one 80 GiB GPU):
#   CONFIG=configs/darcy.yaml   the training config (model, optimizer, schedule)
#   EPOCHS=3  BATCH=8  N_TRAIN=64  N_TEST=16  SEED=0
#   SMALL_BUDGET=8GiB           the stated smaller budget of the third run
#   DEVICE=auto                 fno_datagen's and fno_train's device
#   DATAGEN_BATCH               fno_datagen --batch (default: its own, 32 on a GPU)
#   N_PREDICTIONS=0             test samples per run saved to predictions.h5
#   KEEP_DATA=1                 keep the generated .h5 files in OUT/data/RES/
#   KEEP_CHECKPOINTS=1          keep the runs' checkpoints and model.pt (removed by
#                               default: OUT stays small enough to commit)
#   FNO_BUILD_DIR=build         where apps/fno_datagen, fno_train and fno_bench are
#   FNO_PYTHON=python3          writes the CSV and JSON (standard library only)
set -uo pipefail

usage="usage: bench/resolution_study.sh OUT [RES ...]"
out=${1:?$usage}
shift
resolutions=("$@")
[ ${#resolutions[@]} -gt 0 ] || resolutions=(128 256 512 1024 2048)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
config=${CONFIG:-$root/configs/darcy.yaml}
epochs=${EPOCHS:-3} batch=${BATCH:-8} n_train=${N_TRAIN:-64} n_test=${N_TEST:-16} seed=${SEED:-0}
small_budget=${SMALL_BUDGET:-8GiB}
device=${DEVICE:-auto}
build=${FNO_BUILD_DIR:-$root/build}
python=${FNO_PYTHON:-python3}
datagen=$build/apps/fno_datagen train=$build/apps/fno_train bench=$build/apps/fno_bench
fail() { echo "resolution_study: $*" >&2; exit 2; }
for b in "$datagen" "$train" "$bench"; do [ -x "$b" ] || fail "$b is missing (build it, or set FNO_BUILD_DIR)"; done
[ -f "$config" ] || fail "CONFIG=$config: no such file"
for r in "${resolutions[@]}"; do
  [[ "$r" =~ ^[1-9][0-9]*$ ]] && [ "$r" -ge 3 ] || fail "resolution '$r': expected an integer >= 3"
done
for v in epochs batch n_train n_test; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || fail "${v^^}=${!v}: expected an integer >= 1"
done
# The config and the budget, checked up front (fno_bench reads the config as fno_train does).
msg=$("$bench" --config "$config" --gpu-memory-limit "$small_budget" --dry-run 2>&1 > /dev/null) ||
  fail "$msg"

mkdir -p "$out/runs" "$out/data" || exit 3
out=$(cd "$out" && pwd)
runs=$out/runs.tsv
printf 'resolution\tlabel\tpolicy\tbudget\trun_dir\texit_code\tdatagen_seconds\n' > "$runs"
labels=(none auto "auto_$small_budget")
now() { date +%s.%N; }

for res in "${resolutions[@]}"; do
  data=$out/data/$res
  rm -rf "$data" && mkdir -p "$data"
  t0=$(now)
  "$datagen" --resolution "$res" --samples $((n_train + n_test)) --test-samples "$n_test" \
    --seed "$seed" --device "$device" ${DATAGEN_BATCH:+--batch "$DATAGEN_BATCH"} \
    --progress plain --out "$data/darcy.h5" \
    > "$data/datagen.out" 2> "$data/datagen.log"
  gen_rc=$?
  gen_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  echo "resolution_study: ${res}^2: data (exit $gen_rc, ${gen_s}s)" >&2
  for label in "${labels[@]}"; do
    case $label in
      none) policy=none budget="" args=(--offload none) ;;
      auto) policy=auto budget=free args=(--offload auto) ;;
      *) policy=auto budget=$small_budget args=(--offload auto --gpu-memory-limit "$small_budget") ;;
    esac
    dir=$out/runs/${res}_$label
    rm -rf "$dir" && mkdir -p "$dir"
    if [ "$gen_rc" -ne 0 ]; then
      # No data: the run is an error data point carrying fno_datagen's message.
      tail -1 "$data/datagen.log" > "$dir/stderr.txt"
      rc=$gen_rc
    else
      "$train" --config "$config" --out "$dir" "${args[@]}" \
        --set "data.train_file=$data/darcy_train.h5" --set "data.n_train=$n_train" \
        --set "data.batch_size=$batch" \
        --set "data.test=[{file: '$data/darcy_test.h5', name: test, n_samples: $n_test, batch_size: $batch}]" \
        --set "training.epochs=$epochs" --set "training.seed=$seed" --set "device.name=$device" \
        --set "data.n_predictions=${N_PREDICTIONS:-0}" --set output.progress=plain \
        > "$dir/stdout.txt" 2> "$dir/stderr.txt"
      rc=$?
      [ "${KEEP_CHECKPOINTS:-0}" = 1 ] || rm -f "$dir"/checkpoint_*.pt "$dir"/model.pt
    fi
    echo "resolution_study: ${res}^2 $label: exit $rc$([ "$rc" -ne 0 ] && echo ": $(tail -1 "$dir/stderr.txt")")" >&2
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$res" "$label" "$policy" "$budget" "runs/${res}_$label" "$rc" "$gen_s" >> "$runs"
  done
  [ "${KEEP_DATA:-0}" = 1 ] || rm -f "$data"/darcy_*.h5
done

# The device's memory, for the notebook's capacity line (0: unknown or no GPU).
device_bytes=0
if command -v nvidia-smi > /dev/null 2>&1; then
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2> /dev/null | head -1)
  [[ "$mib" =~ ^[0-9]+$ ]] && device_bytes=$((mib * 1048576))
fi
commit=$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)
export STUDY_COMMAND="bench/resolution_study.sh $out ${resolutions[*]}" STUDY_CONFIG=$config \
  STUDY_EPOCHS=$epochs STUDY_BATCH=$batch STUDY_N_TRAIN=$n_train STUDY_N_TEST=$n_test \
  STUDY_SMALL_BUDGET=$small_budget STUDY_DEVICE_BYTES=$device_bytes STUDY_COMMIT=$commit
exec "$python" "$root/bench/resolution_study.py" "$out"
