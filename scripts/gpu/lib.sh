#!/usr/bin/env bash
# The shared set-up of the GPU machine's suites (scripts/gpu/*.sh), sourced by scripts/gpu.sh:
# builds (Release, CUDA kernels on, in FNO_BUILD_DIR, default /tmp/fno-gpu-build; configured
# once, against the Python's LibTorch) the FNO_TARGETS (default: the GPU tests, fno_bench,
# fno_train, fno_datagen, the micro-benchmarks), then gives the suites:
#   $root $build $bench      the repository (the working directory), the build, fno_bench
#   $out $summary say        $OUT/results/ (OUT defaults to /tmp/fno-gpu-out), its summary.txt,
#                            and say: a line to stdout and to the summary
#   $steps ${common[@]}      BENCH_STEPS (5); fno_bench's 1024^2, batch 8 arguments
#   $script_t0               the call's start (the deadlines of nsdata, nstrain, paper)
#   the helpers below, run_suite NAME (sources scripts/gpu/NAME.sh inside a function) and pack.
# Environment: FNO_BUILD_DIR (/tmp/fno-gpu-build), BENCH_STEPS (5), FNO_TARGETS, OUT.
set -uo pipefail
script_t0=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${FNO_BUILD_DIR:-/tmp/fno-gpu-build}
out=${OUT:-/tmp/fno-gpu-out}/results
mkdir -p "$out"
steps=${BENCH_STEPS:-5}
summary=$out/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
py=$(command -v python3)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_BUILD_TESTS=ON -DFNO_CUDA_KERNELS=ON \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING > "$out/configure.log" 2>&1 ||
    { cat "$out/configure.log"; exit 1; }
fi
t0=$(date +%s)
if [ -n "${FNO_TARGETS:-}" ]; then
  read -r -a targets <<< "$FNO_TARGETS"
else
  targets=(fno_gpu_tests fno_bench fno_train fno_datagen fused_block_tail_bench tiled_step_bench)
  # (mlp_epilogue_bench exists where CMake found cuBLASLt)
  grep -q 'build mlp_epilogue_bench\|bench/mlp_epilogue_bench:' "$build/build.ninja" && targets+=(mlp_epilogue_bench)
fi
cmake --build "$build" --target "${targets[@]}" > "$out/build.log" 2>&1 ||
  { tail -50 "$out/build.log"; exit 1; }
say "build: $(($(date +%s) - t0)) s"
bench=$build/apps/fno_bench
common=(--resolutions 1024 --batches 8 --steps "$steps" --warmup 2)

# neuraloperator and its dependencies, from the wheels carried in .whl (no network there)
use_wheels() {
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl > /dev/null 2>&1
    export PYTHONPATH=/tmp/site
  fi
}
# all GPU tests, with the fused kernels' measured errors pulled out of the log
gpu_tests_fused_errors() {
  timeout 300 "$build/tests/fno_gpu_tests" > "$out/gpu_tests.log" 2>&1
  say "GPU tests (all): exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
    "$out/gpu_tests.log" | tr '\n' ' '))"
  grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests.log" | head -60
  grep -h 'MESSAGE\|: z \|  grad' "$out/gpu_tests.log" > "$out/fused_errors.txt"
}
# compute-sanitizer memcheck of the fused tests (but the 2^31-element one)
memcheck_fused() {
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$build/tests/fno_gpu_tests" -tc='fused*' -tce='*64-bit offsets*' \
    > "$out/memcheck_fused.log" 2>&1
  say "memcheck (fused): exit $? ($(grep -E 'ERROR SUMMARY' "$out/memcheck_fused.log" | tail -1))"
}

# Issue 28's rows: fno_bench none at 64^2, 128^2, 256^2 (batch 32, fp32 and bf16, 30 steps)
# into DIR/NAME.{json,csv,log}; more fno_bench arguments after NAME.
small_bench() {
  local dir=$1 name=$2
  shift 2
  mkdir -p "$dir"
  timeout 200 "$bench" --resolutions 64 128 256 --batches 32 --policies none \
    --precision fp32 bf16 --warmup 5 --steps 30 "$@" --json "$dir/$name.json" \
    --csv "$dir/$name.csv" > /dev/null 2> "$dir/$name.log"
}
# The seed main command (fno_train --config configs/darcy.yaml) into run directory RUN, its
# log RUN.log, more fno_train arguments after RUN; says its whole-process wall time.
seed_run() {
  local run=$1 t1 rc
  shift
  t1=$(date +%s%N)
  timeout 120 "$build/apps/fno_train" --config configs/darcy.yaml --out "$run" "$@" > "$run.log" 2>&1
  rc=$?
  echo "exit $rc in $((($(date +%s%N) - t1) / 1000000)) ms"
}

# One fno_bench run of issue 26's: name, then fno_bench arguments; its JSON,
# CSV and log go to $out/ooc/.
ooc_row() {
  local name=$1
  shift
  mkdir -p "$out/ooc"
  timeout 400 "$bench" --warmup 1 --steps "$steps" "$@" --json "$out/ooc/$name.json" \
    --csv "$out/ooc/$name.csv" > /dev/null 2> "$out/ooc/$name.log"
  say "ooc $name: exit $? $(grep '^fno_bench: ' "$out/ooc/$name.log" | cut -c1-330)"
  grep -h 'over budget\|offload auto: budget' "$out/ooc/$name.log" | cut -c1-300 | tee -a "$summary"
}

# fno_train ARGS... into run directory RUN until DEADLINE s after this script started
# (timeout's SIGTERM: a checkpoint mid-epoch, and --resume goes on from it); the call's exit
# and seconds go to RUN/segments.tsv, the run's config, metrics, segments and summary to D;
# LABEL starts the line it says. Sets train_rc.
train_until() {
  local deadline=$1 label=$2 run=$3 d=$4 t secs
  shift 4
  local left=$((deadline - ($(date +%s) - script_t0)))
  if [ "$left" -lt 30 ]; then  # (timeout 0 would mean no deadline at all)
    train_rc=124
    say "$label: $left s left before the deadline; not started"
    return
  fi
  t=$(date +%s)
  # (train_launcher: empty, or torchrun's command for several ranks)
  timeout -s TERM "$left" "${train_launcher[@]}" "$build/apps/fno_train" "$@" > "$d/train.out" \
    2>> "$d/train.log"
  train_rc=$?
  secs=$(($(date +%s) - t))
  printf '%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$train_rc" "$secs" >> "$run/segments.tsv"
  say "$label: fno_train exit $train_rc after $secs s; $(tail -1 "$run/metrics.jsonl" 2> /dev/null | cut -c1-220)"
  cp "$run"/config.yaml "$run"/metrics.jsonl "$run"/segments.tsv "$d/" 2> /dev/null
  cp "$run"/summary.json "$d/" 2> /dev/null
  # the first test samples' predictions (a few MB at 64^2: notebooks/navier_stokes.ipynb)
  [ -f "$run/predictions.h5" ] && [ "$(stat -c %s "$run/predictions.h5")" -lt 8000000 ] &&
    cp "$run/predictions.h5" "$d/"
  tail -3 "$d/train.log" | cut -c1-250 | tee -a "$summary"
}

train_launcher=()

# A run name's part for a --set KEY=VALUE: the key's last part, "-", the value
# (model.use_channel_mlp=false -> use_channel_mlp-false).
set_tag() {
  printf '%s' "${1##*.}" | tr -c 'A-Za-z0-9_.=-' '_' | tr '=' '-'
}

# The ranks of an nstrain spec (CFG[@SEED][*N][%KEY=VALUE...]): N, or 1.
ns_spec_ranks() {
  local spec=${1%%\%*}
  if [[ $spec == *\** ]]; then echo "${spec#*\*}"; else echo 1; fi
}

# CFG over RANKS ranks: train_launcher (torchrun, or empty for one) and rank_args (the config's
# data.batch_size, its first "  batch_size:" line, in data:, over the ranks); returns 1 with a
# line when that batch does not split.
ns_rank_split() {
  local cfg=$1 ranks=$2 label=$3 bs
  train_launcher=() rank_args=()
  [ "$ranks" -gt 1 ] || return 0
  bs=$(sed -n 's/^  batch_size: *\([0-9][0-9]*\).*/\1/p' "configs/$cfg.yaml" | head -1)
  if [ -z "$bs" ] || [ $((bs % ranks)) -ne 0 ]; then
    say "$label: configs/$cfg.yaml's data.batch_size '${bs}' does not split over $ranks ranks"
    return 1
  fi
  rank_args=(--set "data.batch_size=$((bs / ranks))")
  train_launcher=(torchrun --no-python --standalone --nproc-per-node "$ranks")
}

# memcheck and racecheck on the channel-MLP GPU test's small grids, logs into DIR. racecheck
# also reports hazards in cuBLAS's nvjet kernels (the LibTorch reference's GEMMs), so its exit
# status is not the verdict: the count of hazards outside nvjet is. Leaving nvjet out
# (--kernel-name-exclude) made the sanitizer fail on a hardware exception in a cuBLAS GEMM
# (results/h100-2026-11-26-s11); instrumenting them costs time (about 320 s in all).
# MLPSAN_SUBCASE picks the subcases ("small grids*": both; "small grids of width 20": the
# Navier-Stokes models' shapes), MLPSAN_TOOLS the tools.
mlp_sanitizers() {
  local dir=$1 v
  for v in ${MLPSAN_TOOLS:-memcheck racecheck}; do
    timeout 420 compute-sanitizer --tool $v --error-exitcode 9 \
      "$build/tests/fno_gpu_tests" -tc="fused channel MLP*" -sc="${MLPSAN_SUBCASE:-small grids*}" \
      > "$dir/$v.log" 2>&1
    say "channel MLP $v: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$dir/$v.log" | tail -1);" \
      "$(grep -c 'logged: shape' "$dir/$v.log") shape lines;" \
      "hazards outside cuBLAS's nvjet: $(grep 'Race reported' "$dir/$v.log" | grep -vc nvjet))"
  done
}

# An experiment switch off and on (VAR=0, VAR=1), interleaved twice: fno_bench none at
# 64^2, 128^2, 256^2 (batch 32, fp32 and bf16, small_bench), then the seed main command
# each way (metrics, whole-process wall time), into $out/DIR (files PREFIX<v>_<run>).
switch_ab() {
  local var=$1 dir=$out/$2 prefix=$3 v r
  mkdir -p "$dir"
  for r in a b; do
    for v in 0 1; do
      (export "$var=$v" && small_bench "$dir" "${prefix}${v}_$r")
      say "$var=$v ($r): exit $?"
      grep -h '^fno_bench: ' "$dir/${prefix}${v}_$r.log" | cut -c1-120 | tee -a "$summary"
    done
  done
  for v in 0 1; do
    say "seed main command, $var=$v: $(export "$var=$v" && seed_run "$dir/seed$v")"
    tail -2 "$dir/seed$v.log" | cut -c1-300 | tee -a "$summary"
  done
}

# Runs one suite: scripts/gpu/NAME.sh, sourced inside this function (its locals stay its own,
# and a return ends the suite).
run_suite() {
  local file=$root/scripts/gpu/$1.sh
  if [[ $1 == *[!a-z0-9_]* ]] || [ "$1" = lib ] || [ ! -f "$file" ]; then
    say "unknown suite $1"
    return
  fi
  # shellcheck disable=SC1090
  source "$file"
}

# Packed after every suite, so that a call stopped at its time limit still
# returns what it finished; checkpoints and data sets stay behind (16 MiB a file
# comes back), HDF5 files of 8 MB or less (runs' predictions.h5) travel.
pack() {
  [ -n "${OUT:-}" ] || return 0
  (cd "$OUT" && find results -type f ! -name 'checkpoint_*.pt' ! -name model.pt \
    ! \( -name '*.h5' -size +8000000c \) -print0 | tar --null -T - -czf results.tgz.part) &&
    mv "$OUT/results.tgz.part" "$OUT/results.tgz" && cp "$summary" "$OUT/summary.txt"
}
