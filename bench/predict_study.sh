#!/usr/bin/env bash
# fno_predict's H100 rows (issue 49) in one call, on one GPU:
#   1. a model trained at 256^2: fno_datagen Darcy data at 256^2 and a short
#      fno_train run of configs/darcy.yaml's model on it (or MODEL_RUN=DIR, a
#      run directory to take instead);
#   2. 65536^2, B=1, fp32, under --gpu-memory-limit 8GiB: the input, a Darcy
#      coefficient field, from `fno_datagen --inputs-only` where that mode
#      exists, else from bench/write_field (a thresholded smooth random field,
#      written band by band); the time from start to the renamed output, the
#      host's peak (max RSS), the GPU's peak (fno_predict's gpu_peak_bytes);
#   3. 8192^2, B=1, fp32: the whole grid (no limit) against
#      --gpu-memory-limit 12GiB and 2GiB, on the same input.
# One JSON line per row into $OUT/predict_study.jsonl (and stdout); logs in
# $OUT/predict_study/.
#
#   bench/predict_study.sh                    # from the repository root
#
# Environment: FNO_BUILD_DIR (default /tmp/fno-predict-build; configured here
# when it has no build.ninja), OUT (default /tmp/fno-predict-out), SCRATCH
# (the large files; default /tmp/fno-predict-scratch, removed at the end unless
# KEEP=1), MODEL_RUN, EPOCHS (default 10), N_TRAIN (default 256),
# BIG (default 65536), BIG_PRECISIONS (default fp32; e.g. "fp32 bf16": a row each), MID (default 8192), HOST_LIMIT (fno_predict's
# --host-memory-limit at BIG; default: none), STEPS (default "mid big": the
# 8192^2 rows, the 65536^2 row; "none": the build and the model alone, for a
# first call; a model in SCRATCH/run256 from an earlier call with KEEP=1 is
# taken again), DEVICE (default cuda; cpu with
# small BIG/MID and a MODEL_RUN tries the script anywhere).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${FNO_BUILD_DIR:-/tmp/fno-predict-build}
out=${OUT:-/tmp/fno-predict-out}
scratch=${SCRATCH:-/tmp/fno-predict-scratch}
logs=$out/predict_study
rows=$out/predict_study.jsonl
big=${BIG:-65536}
steps=" ${STEPS:-mid big} "
device=${DEVICE:-cuda}
mid=${MID:-8192}
mkdir -p "$logs" "$scratch"
: > "$rows"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$scratch"' EXIT
py=$(command -v python3)

command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
df -h "$scratch" | tail -1 | tee "$logs/disk.txt"
grep -E 'MemTotal|MemAvailable' /proc/meminfo | tee "$logs/mem.txt"

# 0. The build.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_CUDA_KERNELS=ON \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING > "$logs/configure.log" 2>&1 ||
    { tail -30 "$logs/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build "$build" --target fno_predict fno_train fno_datagen write_field > "$logs/build.log" 2>&1 ||
  { tail -40 "$logs/build.log"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
bin=$build/apps
prec=fp32 # each row's --precision (BIG_PRECISIONS at BIG)
writer=$build/bench/write_field

source "$root/bench/measure.sh"  # measure FILE COMMAND...
# One row: NAME GRID LIMIT INPUT LOG [fno_predict arguments...]
row() {
  local name=$1 grid=$2 limit=$3 input=$4 log=$5
  shift 5
  local pred=$scratch/pred_$name.h5 wall rss rc peak plan bytes
  rm -f "$pred"
  measure "$log.m" "$bin/fno_predict" --model "$run" --input "$input" --out "$pred" \
    --device "$device" --precision "$prec" "$@" 2> "$log" > "$log.out"
  read -r wall rss rc < "$log.m"
  cat "$log.out" >> "$log"
  peak=$(awk '/^gpu_peak_bytes/ {print $2}' "$log.out")
  plan=$(sed -n 's/^fno_predict: plan: //p' "$log" | tr '"' "'")
  bytes=$(stat -c %s "$pred" 2>/dev/null || echo 0)
  local line
  line=$(printf '{"row": "%s", "grid": %s, "batch": 1, "precision": "%s", "gpu_memory_limit": "%s", "exit": %s, "wall_s": %s, "host_peak_bytes": %s, "gpu_peak_bytes": %s, "input_bytes": %s, "output_bytes": %s, "plan": "%s"}' \
    "$name" "$grid" "$prec" "$limit" "$rc" "$wall" "$rss" "${peak:-0}" "$(stat -c %s "$input")" "$bytes" "$plan")
  echo "$line" | tee -a "$rows"
  [ "$rc" = 0 ] || tail -3 "$log"
  rm -f "$pred"
}

# 1. The model, trained at 256^2.
run=${MODEL_RUN:-}
[ -z "$run" ] && [ -f "$scratch/run256/model.pt" ] && run=$scratch/run256 &&
  echo "model: $run (an earlier call's)"
if [ -z "$run" ]; then
  t0=$(date +%s)
  n_train=${N_TRAIN:-256}
  "$bin/fno_datagen" --resolution 256 --samples $((n_train + 32)) --test-samples 32 --seed 0 \
    --device "$device" --progress none --out "$scratch/darcy256.h5" > "$logs/datagen256.log" 2>&1 ||
    { tail -5 "$logs/datagen256.log"; exit 1; }
  run=$scratch/run256
  "$bin/fno_train" --config configs/darcy.yaml --out "$run" \
    --set data.train_file="$scratch/darcy256_train.h5" --set data.n_train="$n_train" \
    --set data.test='[{file: '"$scratch"'/darcy256_test.h5, n_samples: 32, batch_size: 16}]' \
    --set data.batch_size=16 --set training.epochs="${EPOCHS:-10}" \
    > "$logs/train256.log" 2>&1 || { tail -5 "$logs/train256.log"; exit 1; }
  cp "$run/config.yaml" "$run/summary.json" "$logs/" 2>/dev/null
  echo "model: trained at 256^2 in $(($(date +%s) - t0)) s ($run)"
fi

# An input field of S^2 (one sample) at PATH.
field() {
  local s=$1 path=$2
  if "$bin/fno_datagen" --help 2>&1 | grep -q -- '--inputs-only'; then
    "$bin/fno_datagen" --resolution "$s" --samples 1 --seed 1 --inputs-only --device "$device" \
      --progress none --out "$path" > "$logs/field$s.log" 2>&1
  else
    "$writer" --out "$path" --resolution "$s" --samples 1 --seed 1 > "$logs/field$s.log" 2>&1
  fi || { tail -5 "$logs/field$s.log"; return 1; }
  # (the key: fno_datagen's inputs are 'coeff', as write_field's)
  echo "field $s^2: $(stat -c %s "$path") bytes ($(head -c 200 "$logs/field$s.log" | tr '\n' ' '))"
}

# 2. 8192^2: whole grid, 12 GiB, 2 GiB.
if [[ "$steps" == *" mid "* ]]; then
field "$mid" "$scratch/field$mid.h5" || exit 1
row "${mid}_whole" "$mid" none "$scratch/field$mid.h5" "$logs/p${mid}_whole.log"
row "${mid}_12GiB" "$mid" 12GiB "$scratch/field$mid.h5" "$logs/p${mid}_12.log" --gpu-memory-limit 12GiB
row "${mid}_2GiB" "$mid" 2GiB "$scratch/field$mid.h5" "$logs/p${mid}_2.log" --gpu-memory-limit 2GiB
rm -f "$scratch/field$mid.h5"
fi

# 3. 65536^2 under 8 GiB.
if [[ "$steps" == *" big "* ]]; then
t0=$(date +%s)
field "$big" "$scratch/field$big.h5" || exit 1
echo "field $big^2 written in $(($(date +%s) - t0)) s"
host=()
[ -n "${HOST_LIMIT:-}" ] && host=(--host-memory-limit "$HOST_LIMIT")
for prec in ${BIG_PRECISIONS:-fp32}; do
  row "${big}_8GiB_$prec" "$big" 8GiB "$scratch/field$big.h5" "$logs/p${big}_8_$prec.log" \
    --gpu-memory-limit 8GiB "${host[@]}"
done
prec=fp32
rm -f "$scratch/field$big.h5"
fi
echo "rows: $rows"
