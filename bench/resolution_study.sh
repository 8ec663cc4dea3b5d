#!/usr/bin/env bash
# The resolution study, in two parts.
#
# Steps (on a GPU): fno_bench's training step (forward, H1 loss, backward, AdamW) of the
# config's model on random data at each grid of STEP_RES, batch STEP_BATCH, four ways: without
# offload (none), --offload auto on the GPU's free memory, and auto under each of
# SMALL_BUDGETS (8 GiB and 2 GiB). Per cell: the median step time and the peak GPU memory,
# or why it did not run: out of memory (none), refused (auto: no plan within the budget),
# timed out. A way that did not fit at one grid is not run at the larger ones (marked
# skipped, naming the grid that did not fit). notebooks/resolutions.ipynb draws the figure:
# peak GPU memory and step time against the grid, with and without offload.
#
# Training: for each RES, Darcy data from fno_datagen, then the config trained for a few
# epochs the same four ways. Per run: the peak GPU memory, the seconds per epoch, the test
# metrics (offload must not change them) and the status: ok, oom (fno_train's one-line
# out-of-memory error, exit 4) or error. A failed run is a data point; the study goes on.
#
#   bench/resolution_study.sh OUT [RES ...]     (default RES: 128 256 512 1024 2048)
#
# Writes OUT/study.csv, OUT/steps.csv and OUT/study.json ("runs" and "steps", read by
# notebooks/resolutions.ipynb), OUT/steps/RES_LABEL.{json,log} (fno_bench's), OUT/runs/RES_LABEL/
# (fno_train's run directory: config.yaml, metrics.jsonl, summary.json, stdout.txt,
# stderr.txt), and OUT/data/RES/datagen.log. Without a GPU the training runs on the CPU (the
# offload runs train without offload) and the step part is left out.
#
# On one H100 the defaults take about 7 minutes (steps about 3, training about 4); STUDY_SECONDS
# bounds the whole: what has not started by then is marked skipped.
#
# Environment (the defaults fit one 80 GiB GPU):
#   CONFIG=configs/darcy.yaml   the model (and for training: optimizer, schedule)
#   SMALL_BUDGETS="8GiB 2GiB"   the stated smaller budgets of auto (SMALL_BUDGET=B: "B 2GiB")
#   STEP_RES="128 256 512 1024 2048 4096 8192"   the step part's grids ("": none; the
#                               default is "" on the CPU)
#   STEP_BATCH=2  STEP_WARMUP=1  STEP_STEPS=3    its batch, untimed and timed steps per cell
#   STEP_TIMEOUT=180            seconds a cell may take (plan search included)
#   STUDY_SECONDS=0             the whole study's seconds (0: no bound)
#   EPOCHS=3  BATCH=8  N_TRAIN=64  N_TEST=16  SEED=0   the training part
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
read -r -a small_budgets <<< "${SMALL_BUDGETS:-${SMALL_BUDGET:-8GiB} 2GiB}"
device=${DEVICE:-auto}
step_batch=${STEP_BATCH:-2} step_warmup=${STEP_WARMUP:-1} step_steps=${STEP_STEPS:-3}
step_timeout=${STEP_TIMEOUT:-180} study_seconds=${STUDY_SECONDS:-0}
# The step part needs a GPU (fno_bench runs on CUDA): by default none without one.
if [ -n "${STEP_RES+set}" ]; then
  read -r -a step_res <<< "$STEP_RES"
elif [ "$device" != cpu ] && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  step_res=(128 256 512 1024 2048 4096 8192)
else
  step_res=()
fi
build=${FNO_BUILD_DIR:-$root/build}
python=${FNO_PYTHON:-python3}
datagen=$build/apps/fno_datagen train=$build/apps/fno_train bench=$build/apps/fno_bench
fail() { echo "resolution_study: $*" >&2; exit 2; }
for b in "$datagen" "$train" "$bench"; do [ -x "$b" ] || fail "$b is missing (build it, or set FNO_BUILD_DIR)"; done
[ -f "$config" ] || fail "CONFIG=$config: no such file"
for r in "${resolutions[@]}"; do
  [[ "$r" =~ ^[1-9][0-9]*$ ]] && [ "$r" -ge 3 ] || fail "resolution '$r': expected an integer >= 3"
done
for r in "${step_res[@]}"; do
  [[ "$r" =~ ^[1-9][0-9]*$ ]] && [ "$r" -ge 3 ] || fail "STEP_RES: resolution '$r': expected an integer >= 3"
done
for v in epochs batch n_train n_test step_batch step_steps step_timeout; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || fail "${v^^}=${!v}: expected an integer >= 1"
done
for v in step_warmup study_seconds; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || fail "${v^^}=${!v}: expected an integer >= 0"
done
[ ${#small_budgets[@]} -gt 0 ] || fail "SMALL_BUDGETS is empty: expected budgets such as '8GiB 2GiB'"
# The config and the budgets, checked up front (fno_bench reads the config as fno_train does).
for b in "${small_budgets[@]}"; do
  msg=$("$bench" --config "$config" --gpu-memory-limit "$b" --dry-run 2>&1 > /dev/null) || fail "$msg"
done

mkdir -p "$out/runs" "$out/data" "$out/steps" || exit 3
out=$(cd "$out" && pwd)
labels=(none auto)
for b in "${small_budgets[@]}"; do labels+=("auto_$b"); done
now() { date +%s.%N; }
study_t0=$(date +%s)
# Whether STUDY_SECONDS have passed (what is not started then is skipped, for time_reason).
time_up() {
  [ "$study_seconds" -gt 0 ] && [ $(($(date +%s) - study_t0)) -ge "$study_seconds" ]
}
time_reason="skipped: the study's STUDY_SECONDS ($study_seconds s) had passed"
# LABEL -> policy, budget (free for auto's default) and the options both programs take.
label_settings() {
  case $1 in
    none) policy=none budget="" ;;
    auto) policy=auto budget=free ;;
    *) policy=auto budget=${1#auto_} ;;
  esac
}

# --- Steps: fno_bench per grid and way ---
steps=$out/steps.tsv
printf 'resolution\tlabel\tpolicy\tbudget\tbatch\texit_code\tseconds\tskipped\n' > "$steps"
declare -A stop_at=()  # LABEL -> why larger grids are not run
for res in "${step_res[@]}"; do
  for label in "${labels[@]}"; do
    label_settings "$label"
    args=(--policies "$policy")
    [ "$policy" = auto ] && [ "$budget" != free ] && args+=(--gpu-memory-limit "$budget")
    name=steps/${res}_$label
    rm -f "$out/$name.json" "$out/$name.log"
    skipped=${stop_at[$label]:-} rc="" secs=""
    [ -z "$skipped" ] && time_up && skipped=$time_reason
    if [ -z "$skipped" ]; then
      t0=$(now)
      timeout -k 10 "$step_timeout" "$bench" --config "$config" --resolutions "$res" \
        --batches "$step_batch" "${args[@]}" --warmup "$step_warmup" --steps "$step_steps" \
        --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
      rc=$?
      secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
      status=$(sed -n 's/.*"status": "\([^"]*\)".*/\1/p' "$out/$name.json" 2> /dev/null | head -1)
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        stop_at[$label]="skipped: ${res}^2 timed out (STEP_TIMEOUT $step_timeout s)"
      elif [ "$status" = oom ] || [[ "$status" == "over budget"* ]]; then
        stop_at[$label]="skipped: ${res}^2 did not fit"
      fi
      echo "resolution_study: step ${res}^2 b$step_batch $label: exit $rc, ${secs}s: ${status:-$(tail -1 "$out/$name.log")}" | cut -c1-300 >&2
    else
      echo "resolution_study: step ${res}^2 $label: $skipped" >&2
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$res" "$label" "$policy" "$budget" "$step_batch" \
      "$rc" "$secs" "$skipped" >> "$steps"
  done
done

# --- Training: fno_datagen, then fno_train per way ---
runs=$out/runs.tsv
printf 'resolution\tlabel\tpolicy\tbudget\trun_dir\texit_code\tdatagen_seconds\tskipped\n' > "$runs"
for res in "${resolutions[@]}"; do
  data=$out/data/$res
  rm -rf "$data" && mkdir -p "$data"
  gen_rc="" gen_s=""
  if ! time_up; then
    t0=$(now)
    "$datagen" --resolution "$res" --samples $((n_train + n_test)) --test-samples "$n_test" \
      --seed "$seed" --device "$device" ${DATAGEN_BATCH:+--batch "$DATAGEN_BATCH"} \
      --progress plain --out "$data/darcy.h5" \
      > "$data/datagen.out" 2> "$data/datagen.log"
    gen_rc=$?
    gen_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    echo "resolution_study: ${res}^2: data (exit $gen_rc, ${gen_s}s)" >&2
  fi
  for label in "${labels[@]}"; do
    label_settings "$label"
    args=(--offload "$policy")
    [ "$policy" = auto ] && [ "$budget" != free ] && args+=(--gpu-memory-limit "$budget")
    dir=$out/runs/${res}_$label
    rm -rf "$dir" && mkdir -p "$dir"
    skipped="" rc=""
    if [ -z "$gen_rc" ] || time_up; then
      skipped=$time_reason
      echo "$skipped" > "$dir/stderr.txt"
    elif [ "$gen_rc" -ne 0 ]; then
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
    if [ -n "$skipped" ]; then
      echo "resolution_study: ${res}^2 $label: $skipped" >&2
    else
      echo "resolution_study: ${res}^2 $label: exit $rc$([ "$rc" -ne 0 ] && echo ": $(tail -1 "$dir/stderr.txt")")" >&2
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$res" "$label" "$policy" "$budget" "runs/${res}_$label" \
      "$rc" "$gen_s" "$skipped" >> "$runs"
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
  STUDY_SMALL_BUDGET=${small_budgets[0]} STUDY_SMALL_BUDGETS="${small_budgets[*]}" \
  STUDY_DEVICE_BYTES=$device_bytes STUDY_COMMIT=$commit STUDY_STEP_BATCH=$step_batch \
  STUDY_STEP_STEPS=$step_steps STUDY_STEP_WARMUP=$step_warmup
exec "$python" "$root/bench/resolution_study.py" "$out"
