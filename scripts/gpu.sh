#!/usr/bin/env bash
# One GPU-machine call: build (Release, in /tmp), then run the named suites.
# Raw outputs go to $OUT/results/ (packed as $OUT/results.tgz when OUT is set,
# since only a few files come back from the device machine), a short table to
# stdout at the end.
#
#   scripts/gpu.sh tests memcheck offload1024 neuralop
#
# Suites:
#   tests        build/tests/fno_gpu_tests (offload races, gradients, goldens)
#   memcheck     the same under compute-sanitizer --tool memcheck
#   offload1024  fno_bench, seed FNO, batch 8, 1024^2: none, all/4, recompute/4,
#                recompute+offload/4, auto at 8, 4 and 2 GiB (median of 5 steps)
#   neuralop     bench/neuralop_step.py at 1024^2, batch 8, plain and save_on_cpu
#                (neuraloperator, tensorly, tensorly-torch come as wheels in .whl/)
#   offload2048  2048^2, batch 8: recompute/8, recompute+offload/8, auto 16 GiB
#   largest      the largest batch-8 grid auto trains under --cap 16GiB
#   inflight2048 recompute/8 and recompute+offload/8 at 2048^2 under three back-pressure windows
#   ro2048       recompute/8 and recompute+offload/8 at 2048^2: learning window and fixed 1 GiB
#   search2048   auto's plan search at 2048^2, batch 8: free memory, 16 GiB, 8 GiB
#   paper_timing fno_bench on configs/darcy_paper_s{211,421}.yaml (batch 20, none)
#   paper        a row of the FNO paper's table (PAPER_S=211|421), resumable across calls (see it)
#   compress     the Darcy seed run, every activation offloaded: lossless vs bf16
#   timelines    one step's memory timeline at 1024^2 for none, all, r+o, auto
#   study        bench/resolution_study.sh (128^2 .. 2048^2: none, auto, auto 8 GiB)
#   predictions256  fno_datagen 256^2 data, 30 epochs of the seed model, 4 predictions
#   fused        the fused block tail's micro-benchmark; fno_bench none with FNO_FUSED=0 and 1
#   chunks2048   2048^2: recompute vs recompute+offload in fp32 and bf16, auto under 8 GiB
#   ddpgraphs    several ranks under CUDA graphs: the two-graph step's GPU test (one GPU), then on
#                two GPUs the distributed CLI test with NCCL, the seed run on 2 ranks graphs off
#                and on, fno_bench 64^2/128^2 off and on (FNO_TARGETS with fno_gpu_tests)
#   ddp          two GPUs: tests/cli/test_distributed.sh with NCCL, fno_bench under
#                torchrun (none, auto 8 GiB) with the scaling efficiency
#   k14          issue 14 in one call: the fused micro-benchmark (fp32 3xTF32 and FFMA, tf32,
#                bf16, half), fno_bench none (fp32, tf32, bf16; fp32 in 3xTF32), the fused GPU
#                tests, memcheck of them; the benchmarks also from BASE_BUILD (the code before,
#                built alongside; the suite waits for BASE_BUILD/.done) when it is set
#   ffma         issue 14, the fp32 block tail (default: FFMA forward, 3xTF32 backward): the
#                micro-benchmark (every dtype), fno_bench none in fp32 (either), the
#                GPU tests, memcheck of the fused ones, the fp32 Darcy seed run on either; the
#                benchmarks also from BASE_BUILD as k14
#   seednoise    the fp32 Darcy seed run on every fp32 block-tail mode and the LibTorch path
#   bar14        issue 14's bar: fno_bench none and auto 8 GiB (fp32, 1024^2, b8) against
#                bench/neuralop_step.py (needs .whl), the fused micro-benchmark (every dtype)
#   tcprof       Nsight Compute on the fp32 3xTF32 backward (issue rate, stall reasons, SASS)
#   seed16       the Darcy seed config (16^2), seeds 0-2: fno_train (also with one checkpoint at
#                the end and no predictions) against neuraloperator (bench/neuralop_darcy.py),
#                metrics and wall time, in one call
#   tiled        the tiled step's GPU tests; bench/tiled_step_bench against the whole-grid step
#                at 2048^2 and 4096^2 (fp32, bf16, bf16 host storage)
#   ooc          issue 26's rows: fno_bench none and auto under small budgets at 2048^2 (b8),
#                4096^2 (b2 fp32/bf16, b8), 8192^2 (b1)
#   ooccurve     auto's step time against the budget: 2048^2 b8 at 1, 4, 8, 16 GiB; 4096^2 b2 at
#                2, 8, 16 GiB (with ooc's rows: the out-of-core curve)
#   tiledtests   the tiled step's GPU tests alone (tests/test_gpu_tiled.cpp: gradients, auto's
#                tiles, its host-memory refusal, the out-of-memory advice)
#   ooc3d        the 3D FNO (configs/poisson3d.yaml, modes 16^3) at 256^3: none, auto 8 GiB
#   oocrun       the whole fno_train run at 1024^2, b8, 3 epochs: none and auto under 4 GiB
#   nsgpu        Navier-Stokes on CUDA: smoke data and both training modes; the paper's
#                protocol (nu 1e-3, T 50) for 16 samples, timed
#   nsdata       a set of the FNO paper's Navier-Stokes table (NSDATA_NU 1e-3 / NSDATA_T 50, or
#                1e-4 / 30, 1e-5 / 20; 256^2 -> 64^2, 1200 samples, 200 for testing, seed 0,
#                float32, dt NSDATA_DT 1e-4) by fno_datagen --resume, one worker per GPU,
#                stopped by SIGTERM at NSDATA_DEADLINE (560) s after this script started; the
#                kept batches stay in NSDATA_DIR (/tmp/fno-nsdata) for the next call on the same
#                warm machine only (docs/data.md: nothing larger than 64 MiB travels, so a fresh
#                machine starts again)
#   nstrain      configs/$NSTRAIN_CONFIG.yaml (one or more) on nsdata's set (the same NSDATA_*),
#                one config per GPU at once, resumable within one warm machine (SIGTERM at
#                NSTRAIN_DEADLINE, 555 s); their metrics come back. NSTRAIN_CARRY=1 brings an
#                unfinished run's checkpoint back ($OUT/carry_NAME.tgz, up to 16 MiB), which a
#                later lease resumes from NSTRAIN_CARRY_IN (e.g. .carry/ns, carried);
#                scripts/ns_lease.sh runs nsdata and nstrain detached, across a lease's calls
#   largestcurve the largest grid auto trains at batch 1 under --cap 4GiB and 16GiB (--find-largest)
#   prof         traced steps with their host calls and idle gaps: 128^2 b32 fp32/bf16,
#                2048^2 b8 auto under 2 GiB (bench/trace_kernels.py --gaps)
#   nsepoch      seconds per epoch of the paper's models (NSEPOCH_CONFIGS, nu = 1e-5's by default;
#                CFG%KEY=VALUE and CFG*N as nstrain's) on
#                a small nsdata set (issue 27), also from an fno_train of the code before
#                (NSEPOCH_BASE_TRAIN)
#   nsprof       the paper's Navier-Stokes models' steps (fno_bench, configs/ns_v1e-5_fno{3d,2d}):
#                graphs on/off, one traced step summed by kernel (issue 27's training time)
#   mlpsan       memcheck and racecheck on the channel-MLP GPU test's small grids
#                (MLPSAN_SUBCASE, MLPSAN_TOOLS: see mlp_sanitizers)
#   nsmlp        issue 27: width-20 blocks' channel MLPs and 128-wide projections on the fused
#                kernels: their GPU tests (and the channel-MLP test's small grids under memcheck
#                and racecheck), then fno_bench none (graphs on, fp32) on
#                configs/ns_v1e-5_fno{3d,2d}.yaml with FNO_FUSED_MLP=0 and 1, interleaved twice
#   tiledprof    one traced step of the whole-grid and tiled steps at 2048^2 and 4096^2, summed
#                by kernel (bench/trace_kernels.py)
#   mlp          the fused channel MLP's GPU tests; fno_bench with and without it (FNO_FUSED_MLP)
#                at 1024^2 (none, fp32/bf16) and 2048^2 (none, auto under 2 GiB), batch 8
#   mlpbwd       issue 28: fno_bench none at 64^2/128^2/256^2 with the session's start's channel-MLP
#                backward and first-dim transform (FNO_FUSED_MLP_BACKWARD=0, FNO_DFT_FIRST_DIM=0),
#                then each change on; memcheck and racecheck on the channel-MLP GPU test
#   ooc2048      issue 26's first row alone: 2048^2, b8, none and auto under 2 GiB
#   h1loss       issue 28: the fused relative H1 loss: its GPU tests (and under memcheck and
#                racecheck), then fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16,
#                with FNO_FUSED_LOSS=0 and 1, twice; the seed main command both ways
#   fork         issue 28: fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16, with
#                the GELU fork off (FNO_GELU_FORK=0) and on, twice; the seed main command both ways
#   dftgemm      issue 28: the last dim's real-DFT GEMM shapes at 64^2/128^2/256^2 (batch 32, 32
#                channels, 9 modes) under cuBLAS and Triton against a copy's floor
#                (bench/dft_gemm_probe.py)
#   dftexpand    issue 28: fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16, with the
#                DFT expand kernel off (FNO_DFT_EXPAND=0) and on, twice; the seed main command
#                both ways
#   small        issue 28's rows: fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16;
#                the seed main command's whole-process wall time
#   moonshot     issue 26's moonshot: 16384^2, batch 1, bf16, auto on the whole GPU
#   nsspeed      the Navier-Stokes generator at 256^2 over one time unit: float64 and float32,
#                batch 16/64/256 and automatic, CUDA graphs on and off; seconds a sample at T 50
#   nsgen        the Navier-Stokes generator's fused CUDA step against LibTorch's (FNO_NS_FUSED=0
#                and 1, interleaved twice): 256^2 -> 64^2, float32, 64 samples in a batch of 64,
#                T 1 (10^4 steps); seconds each
#   nsooc        fno_bench on the space-time FNO-3D (configs/ns_v1e-3_fno3d.yaml) at 256^2 x 40,
#                batch 4: none, and auto under 4, 8 and 16 GiB
#   precision    fno_bench in fp32/tf32/bf16/fp16 at 1024^2, bf16 auto 4 GiB,
#                neuraloperator's precision rows, the Darcy seed run in fp32/bf16/fp16
#   graphs       issue 28's CUDA graphs: their GPU tests; fno_bench none at 64^2/128^2/256^2,
#                batch 32, fp32 and bf16, with --cuda-graphs off and on; the seed main command
#                with training.cuda_graphs off and on (whole-process wall time, final metrics)
#   domain       issue 50 on 4 GPUs: the exactness test with NCCL (when fno_tests is built), then
#                bench/domain_parallel_study.sh (DOMAIN_ROWS: strong8k weak strong16k 3d largest,
#                default all): fno_bench --domain-parallel on 1, 2, 4 GPUs
#   graphs85     configs/darcy_paper_s85.yaml (data by fno_datagen, 1200 samples at 421^2 every
#                5th node) for GRAPHS85_EPOCHS (20) epochs with graphs off and on: seconds per
#                epoch, and 500 epochs extrapolated
# Environment: FNO_BUILD_DIR (default /tmp/fno-gpu-build), BENCH_STEPS (5), FNO_TARGETS
# (what to build; default: the tests, fno_bench, fno_train, fno_datagen, the micro-benchmark).
set -uo pipefail
script_t0=$(date +%s)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
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

# One config of nstrain (configs/CFG.yaml, or CFG@SEED: training.seed SEED; *N: N ranks under
# torchrun on the GPUs CUDA_VISIBLE_DEVICES names, each rank a share of the config's
# data.batch_size, so that a step sees the same batch; a suffix %KEY=VALUE, repeatable, adds
# that --set to this run alone) on nsdata's set, into NSDATA_DIR/run_CFG (run_CFG_seedSEED,
# then _ranksN, then _KEY-VALUE for each suffix: the key's last part).
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

ns_train_one() {
  local spec=${1%%\%*} sets=() kv1 ranks
  [[ $1 == *%* ]] && IFS=% read -r -a sets <<< "${1#*%}"
  ranks=$(ns_spec_ranks "$1")
  spec=${spec%%\**}
  local cfg=${spec%@*} seed='' nu=${NSDATA_NU:-1e-3} tf=${NSDATA_T:-50} dir=${NSDATA_DIR:-/tmp/fno-nsdata}
  [[ $spec == *@* ]] && seed=${spec#*@}
  local name=$cfg${seed:+_seed$seed}
  [ "$ranks" -gt 1 ] && name+=_ranks$ranks
  for kv1 in "${sets[@]}"; do
    name+=_$(set_tag "$kv1")
  done
  local stem=$dir/ns_v${nu}_T${tf} run=$dir/run_$name d=$out/nstrain_$name kv
  mkdir -p "$d"
  if [ ! -f "${stem}_train.h5" ] || [ ! -f "${stem}_test.h5" ]; then
    say "nstrain $name: no ${stem}_train.h5 (run nsdata with the same NSDATA_* first)"
    return
  fi
  local args=(--config "configs/$cfg.yaml" --out "$run" --set "data.train_file=${stem}_train.h5"
    --set "data.test=[{file: ${stem}_test.h5, name: ns, n_samples: ${NSDATA_TEST:-200}, batch_size: 10}]")
  [ -n "$seed" ] && args+=(--set "training.seed=$seed")
  ns_rank_split "$cfg" "$ranks" "nstrain $name" || return
  args+=("${rank_args[@]}")
  for kv in ${NSTRAIN_SET:-}; do args+=(--set "$kv"); done
  for kv1 in "${sets[@]}"; do args+=(--set "$kv1"); done
  # A run carried from an earlier lease (NSTRAIN_CARRY_IN/carry_NAME.tgz, what NSTRAIN_CARRY=1
  # brought back): its checkpoint goes on, on the set made again from the same seed.
  local carried=${NSTRAIN_CARRY_IN:-}/carry_$name.tgz
  if [ ! -f "$run/checkpoint_latest.pt" ] && [ -n "${NSTRAIN_CARRY_IN:-}" ] && [ -f "$carried" ]; then
    mkdir -p "$run" && tar -xzf "$carried" -C "$run" &&
      say "nstrain $name: resumes the carried run ($(tail -1 "$run/metrics.jsonl" | cut -c1-60))"
  fi
  # A run with a checkpoint goes on; one stopped before its first checkpoint starts again
  # (fno_train writes over no run directory: this script made it, and removes it).
  if [ -f "$run/checkpoint_latest.pt" ]; then args=(--resume "$run"); else rm -rf "$run"; fi
  train_until "${NSTRAIN_DEADLINE:-555}" "nstrain $name" "$run" "$d" "${args[@]}"
  # NSTRAIN_CARRY=1: an unfinished run's latest checkpoint, config and metrics come back as
  # $OUT/carry_NAME.tgz (a file comes back up to 16 MiB: the FNO-2D's, about 11 MB, does; the
  # FNO-3D's does not), for a later lease's NSTRAIN_CARRY_IN.
  if [ "${NSTRAIN_CARRY:-0}" = 1 ] && [ -n "${OUT:-}" ] && [ "$train_rc" != 0 ] &&
    [ -f "$run/checkpoint_latest.pt" ]; then
    tar -C "$run" -czf "$OUT/carry_$name.tgz" checkpoint_latest.pt config.yaml \
      $(cd "$run" && ls metrics.jsonl segments.tsv 2> /dev/null)
    if [ "$(stat -c %s "$OUT/carry_$name.tgz")" -gt 16000000 ]; then
      say "nstrain $name: its checkpoint ($(stat -c %s "$OUT/carry_$name.tgz") bytes packed) is too large to come back"
      rm -f "$OUT/carry_$name.tgz"
    else
      say "nstrain $name: carry_$name.tgz ($(stat -c %s "$OUT/carry_$name.tgz") bytes) comes back"
    fi
  fi
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

run_suite() {
  case "$1" in
    tests)
      timeout 300 "$build/tests/fno_gpu_tests" > "$out/gpu_tests.log" 2>&1
      say "tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' "$out/gpu_tests.log" | tr '\n' ' '))"
      grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests.log" | head -80
      ;;
    memcheck)
      # (all but the 2^31-element fused test, which memcheck would take minutes over)
      timeout 480 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$build/tests/fno_gpu_tests" -tce="*64-bit offsets*" > "$out/memcheck.log" 2>&1
      say "memcheck: exit $? ($(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1))"
      ;;
    offload1024)
      "$bench" "${common[@]}" --policies none,all,recompute,recompute+offload --chunks 4 \
        --json "$out/bench1024_fixed.json" --csv "$out/bench1024_fixed.csv" \
        > /dev/null 2> "$out/bench1024_fixed.log"
      for b in 8 4 2; do
        "$bench" "${common[@]}" --policies auto --gpu-memory-limit ${b}GiB \
          --json "$out/bench1024_auto${b}.json" --csv "$out/bench1024_auto${b}.csv" \
          > /dev/null 2> "$out/bench1024_auto${b}.log"
        echo "auto ${b}GiB exit $?" >> "$out/bench1024_auto${b}.log"
      done
      grep -h '^fno_bench:\|exit\|auto:' "$out"/bench1024_*.log | tee -a "$summary"
      ;;
    neuralop)
      use_wheels
      for flag in "" --save-on-cpu; do
        python3 bench/neuralop_step.py --resolution 1024 --batch 8 --steps "$steps" $flag \
          >> "$out/neuralop_step.jsonl" 2> "$out/neuralop_step${flag}.log"
      done
      tee -a "$summary" < "$out/neuralop_step.jsonl"
      ;;
    offload2048)
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 \
        --policies recompute,recompute+offload --chunks 8 \
        --json "$out/bench2048_fixed.json" --csv "$out/bench2048_fixed.csv" \
        > /dev/null 2> "$out/bench2048_fixed.log"
      local t=$(date +%s%N)
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies auto \
        --gpu-memory-limit 16GiB --json "$out/bench2048_auto16.json" \
        > /dev/null 2> "$out/bench2048_auto16.log"
      echo "auto 16GiB exit $?, wall $((($(date +%s%N) - t) / 1000000)) ms" >> "$out/bench2048_auto16.log"
      grep -h '^fno_bench:\|exit\|auto:.*search' "$out"/bench2048_*.log | tee -a "$summary"
      ;;
    largest)
      "$bench" --resolutions 512 --batches 8 --steps 1 --warmup 1 --policies auto --cap 16GiB \
        --find-largest --grid-step 128 --grid-max 4096 --json "$out/largest_auto_cap16.json" \
        > /dev/null 2> "$out/largest_auto_cap16.log"
      grep -h 'largest\|^fno_bench' "$out/largest_auto_cap16.log" | cut -c1-200 | tee -a "$summary"
      ;;
    inflight2048)
      # recompute+offload's back-pressure window against its forward waits, at 2048^2
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies recompute --chunks 8 \
        --json "$out/inflight2048_recompute.json" > /dev/null 2> "$out/inflight2048.log"
      for mib in 1024 4096 16384; do
        "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies recompute+offload \
          --chunks 8 --max-inflight-mib $mib --json "$out/inflight2048_ro_$mib.json" \
          > /dev/null 2>> "$out/inflight2048.log"
      done
      grep -h '^fno_bench' "$out/inflight2048.log" | cut -c1-260 | tee -a "$summary"
      ;;
    ro2048)
      # issue 12, bar 6: recompute+offload/8 against recompute/8 at 2048^2, batch 8,
      # with the learning back-pressure window (auto, the default) and a fixed 1 GiB one
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 3 --policies recompute,recompute+offload \
        --chunks 8 --json "$out/ro2048_auto.json" --csv "$out/ro2048_auto.csv" \
        > /dev/null 2> "$out/ro2048.log"
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 3 --policies recompute+offload \
        --chunks 8 --max-inflight-mib 1024 --json "$out/ro2048_fixed1024.json" \
        > /dev/null 2>> "$out/ro2048.log"
      grep -h '^fno_bench\|^  ' "$out/ro2048.log" | cut -c1-300 | tee -a "$summary"
      ;;
    search2048)
      # issue 12: auto's plan search at 2048^2, batch 8, under the free memory, 16 and 8 GiB
      for b in free 16GiB 8GiB; do
        local lim=()
        [ "$b" = free ] || lim=(--gpu-memory-limit "$b")
        "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies auto "${lim[@]}" \
          --json "$out/search2048_$b.json" > /dev/null 2> "$out/search2048_$b.log"
        echo "auto $b exit $?" >> "$out/search2048_$b.log"
      done
      grep -h '^fno_bench\|exit\|auto: budget' "$out"/search2048_*.log | cut -c1-330 | tee -a "$summary"
      ;;
    paper_timing)
      # issue 15: the step of the FNO paper's configs at s = 211 and 421 (batch 20)
      for s in 211 421; do
        "$bench" --config configs/darcy_paper_s$s.yaml --resolutions $s --batches 20 --steps 5 \
          --warmup 2 --policies none --json "$out/paper_s$s.json" > /dev/null 2> "$out/paper_s$s.log"
        grep -h '^fno_bench\|^  ' "$out/paper_s$s.log" | cut -c1-200 | tee -a "$summary"
      done
      ;;
    paper)
      # issue 15: one row of the FNO paper's Darcy table (configs/darcy_paper_s$PAPER_S.yaml,
      # 500 epochs), resumable across calls. The data (1200 samples at 421^2, seed 0, every
      # k-th node) are made again each call (same bytes); training stops by SIGTERM at
      # PAPER_DEADLINE s after this script started (a checkpoint mid-epoch) and the next call
      # resumes from .paper/s$PAPER_S/ (carried: the run directory as this suite left it, the
      # checkpoint reassembled from $OUT/paper_s$PAPER_S.ckpt.part*, each under 16 MiB).
      local s=${PAPER_S:-211}
      local k=$((420 / (s - 1))) d=$out/paper_s$s data=/tmp/paper_data run=/tmp/paper_run_s$s
      mkdir -p "$d" "$data"
      local t=$(date +%s)
      "$build/apps/fno_datagen" --resolution 421 --subsample $k --samples 1200 --test-samples 200 \
        --seed 0 --device cuda --progress plain --out "$data/darcy_s$s.h5" > "$d/datagen.log" 2>&1
      say "paper s=$s: datagen exit $? in $(($(date +%s) - t)) s"
      local args=(--config "configs/darcy_paper_s$s.yaml" --out "$run"
        --set "data.train_file=$data/darcy_s${s}_train.h5" --set data.n_train=1000
        --set "data.test=[{file: $data/darcy_s${s}_test.h5, name: '$s', n_samples: 200, batch_size: 20}]")
      if [ -f ".paper/s$s/config.yaml" ]; then
        rm -rf "$run" && cp -r ".paper/s$s" "$run"
        cat ".paper/s$s"/checkpoint_latest.pt.part* > "$run/checkpoint_latest.pt"
        rm -f "$run"/checkpoint_latest.pt.part*
        args=(--resume "$run")
      fi
      train_until "${PAPER_DEADLINE:-555}" "paper s=$s" "$run" "$d" "${args[@]}"
      if [ -n "${OUT:-}" ] && [ -f "$run/checkpoint_latest.pt" ] && [ "$train_rc" != 0 ]; then
        split -b 15M -d "$run/checkpoint_latest.pt" "$OUT/paper_s$s.ckpt.part"
        ls -la "$OUT"/paper_s$s.ckpt.part* | tee -a "$summary"
      fi
      ;;
    compress)
      for c in none bf16; do
        "$build/apps/fno_train" --config configs/darcy.yaml --out "$out/seed_compress_$c" \
          --offload all --set offload.min_bytes=0 --set offload.compress=$c \
          --set output.progress=none > "$out/seed_compress_$c.log" 2>&1
        say "compress $c: exit $? $(tail -1 "$out/seed_compress_$c/metrics.jsonl" | cut -c1-300)"
      done
      ;;
    timelines)
      mkdir -p "$out/timelines"
      "$bench" --resolutions 1024 --batches 8 --steps 2 --warmup 1 \
        --policies none,all,recompute+offload --chunks 4 --timeline-dir "$out/timelines" \
        > /dev/null 2> "$out/timelines.log"
      "$bench" --resolutions 1024 --batches 8 --steps 2 --warmup 1 --policies auto \
        --gpu-memory-limit 8GiB --timeline-dir "$out/timelines" > /dev/null 2>> "$out/timelines.log"
      ls "$out/timelines" | tee -a "$summary"
      ;;
    domain)
      # issue 50: one sample across GPUs (bench/domain_parallel_study.sh; DOMAIN_ROWS picks
      # rows, default all; about 8 minutes on 4 x H100)
      # the exactness test with NCCL, rank r on GPU r (when fno_tests is among FNO_TARGETS)
      if [ -x "$build/tests/fno_tests" ]; then
        "$build/tests/fno_tests" -tc="with NCCL on GPUs*" > "$out/domain_nccl_test.log" 2>&1
        say "domain: NCCL exactness test exit $? ($(grep -c 'worst gradient' "$out/domain_nccl_test.log") checks)"
        grep -E 'worst gradient|test cases|skipped' "$out/domain_nccl_test.log" | tee -a "$summary"
      fi
      local rows=()
      read -r -a rows <<< "${DOMAIN_ROWS:-}"
      FNO_BUILD_DIR=$build bench/domain_parallel_study.sh "$out/domain" "${rows[@]}" \
        > "$out/domain.log" 2>&1
      say "domain: exit $?"
      cat "$out/domain/summary.txt" 2> /dev/null | tee -a "$summary"
      ;;
    study)
      # issue 15: the resolution study (bench/resolution_study.sh's defaults)
      FNO_BUILD_DIR=$build FNO_PYTHON=python3 bench/resolution_study.sh "$out/resolution_study" \
        > "$out/resolution_study.log" 2>&1
      say "study: exit $?"
      grep '^resolution_study' "$out/resolution_study.log" | cut -c1-220 | tee -a "$summary"
      ;;
    predictions256)
      # a model trained on the GPU at 256^2 (fno_datagen data), for its predictions
      local d=$out/predictions256
      mkdir -p "$d"
      "$build/apps/fno_datagen" --resolution 256 --samples 1100 --test-samples 100 --seed 0 \
        --device cuda --out /tmp/darcy256.h5 > "$d/datagen.log" 2>&1
      "$build/apps/fno_train" --config configs/darcy.yaml --out "$d/run" \
        --set data.train_file=/tmp/darcy256_train.h5 --set data.n_train=1000 \
        --set "data.test=[{file: /tmp/darcy256_test.h5, name: '256', n_samples: 100, batch_size: 20}]" \
        --set training.epochs=30 --set data.n_predictions=4 --set output.progress=plain \
        > "$d/train.log" 2>&1
      say "predictions256: exit $? $(tail -1 "$d/run/metrics.jsonl" | cut -c1-200)"
      ;;
    precision)
      # issue 13: every precision (seed FNO, batch 8, 1024^2, none), bf16 under
      # auto at 4 GiB, neuraloperator's precision rows, the Darcy seed run in
      # fp32, bf16 and fp16 (20 epochs, same seed)
      "$bench" "${common[@]}" --policies none --precision fp32,tf32,bf16,fp16 \
        --json "$out/precision1024.json" --csv "$out/precision1024.csv" \
        > /dev/null 2> "$out/precision1024.log"
      "$bench" "${common[@]}" --policies auto --gpu-memory-limit 4GiB --precision bf16,fp32 \
        --json "$out/precision1024_auto4.json" --csv "$out/precision1024_auto4.csv" \
        > /dev/null 2> "$out/precision1024_auto4.log"
      grep -h '^fno_bench' "$out"/precision1024*.log | cut -c1-240 | tee -a "$summary"
      use_wheels
      for args in "--precision fp32" "--precision tf32" "--precision fp16" \
        "--precision fp16 --block-precision mixed" "--precision bf16"; do
        python3 bench/neuralop_step.py --resolution 1024 --batch 8 --steps "$steps" $args \
          >> "$out/neuralop_precision.jsonl" 2>> "$out/neuralop_precision.log"
      done
      tee -a "$summary" < "$out/neuralop_precision.jsonl"
      # (tf32 too: how far a perturbation of rounding size moves the 20-epoch metrics)
      for p in fp32 tf32 bf16 fp16; do
        "$build/apps/fno_train" --config configs/darcy.yaml --precision $p --out "$out/seed_$p" \
          --set output.progress=none > "$out/seed_$p.log" 2>&1
        say "seed $p: exit $? $(tail -1 "$out/seed_$p/metrics.jsonl" | cut -c1-300)"
      done
      ;;
    chunks2048)
      # 2048^2, batch 8: recompute against recompute+offload in fp32 and bf16 (half the
      # bytes on the link), and auto under 8 GiB (spatial chunks of the MLPs)
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 \
        --policies recompute,recompute+offload --chunks 8 --precision fp32,bf16 \
        --json "$out/bench2048_precision.json" > /dev/null 2> "$out/bench2048_precision.log"
      "$bench" --resolutions 2048 --batches 8 --steps 3 --warmup 1 --policies auto \
        --gpu-memory-limit 8GiB --json "$out/bench2048_auto8.json" \
        > /dev/null 2> "$out/bench2048_auto8.log"
      grep -h '^fno_bench\|auto: budget' "$out"/bench2048_precision.log "$out"/bench2048_auto8.log \
        | cut -c1-260 | tee -a "$summary"
      ;;
    fused)
      # issue 14: the fused block tail's micro-benchmark (GB/s and TFLOP/s against the
      # device's peak, and the LibTorch path) and fno_bench none with the kernels off and on
      timeout 120 "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
        --dtypes float,3xtf32,tf32,bf16,half > "$out/fused_micro_bench.txt" 2>&1
      say "fused micro-bench: exit $?"
      tee -a "$summary" < "$out/fused_micro_bench.txt"
      for f in 0 1; do
        FNO_FUSED=$f "$bench" "${common[@]}" --policies none \
          --json "$out/bench1024_none_fused$f.json" > /dev/null 2> "$out/bench1024_none_fused$f.log"
        say "FNO_FUSED=$f: $(grep '^fno_bench' "$out/bench1024_none_fused$f.log" | cut -c1-120)"
      done
      ;;
    k14)
      local base=${BASE_BUILD:-} micro=(--batch 8 --channels 32 --grid 1024 --no-unfused)
      if [ -n "$base" ]; then
        for _ in $(seq 400); do [ -f "$base/.done" ] && break; sleep 1; done
        say "base build: exit $(cat "$base/.done" 2> /dev/null || echo missing)"
      fi
      timeout 150 "$build/bench/fused_block_tail_bench" "${micro[@]}" \
        --dtypes float,3xtf32,tf32,bf16,half --sweep > "$out/micro_after.txt" 2>&1
      say "micro-bench (this code): exit $?"
      grep -v '/l2:' "$out/micro_after.txt" | tee -a "$summary"
      if [ -x "$base/bench/fused_block_tail_bench" ]; then
        timeout 120 "$base/bench/fused_block_tail_bench" "${micro[@]}" \
          --dtypes float,tf32,bf16,half > "$out/micro_before.txt" 2>&1
        say "micro-bench (before): exit $?"
        grep '^float\|^tf32\|^bf16\|^half' "$out/micro_before.txt" | tee -a "$summary"
      fi
      gpu_tests_fused_errors
      local b
      for b in after before after_3xtf32; do
        local exe=$bench env=() prec=fp32,tf32,bf16
        [ "$b" = before ] && exe=$base/apps/fno_bench
        [ "$b" = after_3xtf32 ] && env=(FNO_BLOCK_TAIL_FP32=3xtf32) && prec=fp32
        [ -x "$exe" ] || continue
        env "${env[@]}" timeout 150 "$exe" "${common[@]}" --policies none --precision $prec \
          --json "$out/none_$b.json" > /dev/null 2> "$out/none_$b.log"
        say "fno_bench none ($b): exit $?"
        grep -h '^fno_bench' "$out/none_$b.log" | cut -c1-200 | tee -a "$summary"
      done
      if [ -n "${K14_PROBE:-}" ] && [ -x "$build/bench/mlp_epilogue_bench" ]; then
        ldd "$build/bench/mlp_epilogue_bench" | grep -i cublas > "$out/mlp_epilogue_ldd.txt"
        md5sum "$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')"/../nvidia/cu13/lib/libcublasLt.so* \
          /usr/local/cuda/lib64/libcublasLt.so* >> "$out/mlp_epilogue_ldd.txt" 2>&1
        timeout 120 "$build/bench/mlp_epilogue_bench" --batch 8 --grid 1024 --dtypes float,bf16 \
          > "$out/mlp_epilogue_bench.txt" 2>&1
        say "mlp epilogue bench: exit $?"
        tee -a "$summary" < "$out/mlp_epilogue_bench.txt"
      fi
      memcheck_fused
      # The Darcy seed run (20 epochs, same seed) in fp32: 3xTF32 block tail and FFMA (default)
      local m
      for m in 3xtf32 ffma; do
        FNO_BLOCK_TAIL_FP32=$m timeout 150 "$build/apps/fno_train" --config configs/darcy.yaml \
          --out "$out/seed_fp32_$m" --set output.progress=none > "$out/seed_fp32_$m.log" 2>&1
        say "seed fp32 $m: exit $? $(tail -1 "$out/seed_fp32_$m/metrics.jsonl" | cut -c1-300)"
      done
      ;;
    ffma)
      local base=${BASE_BUILD:-} micro=(--batch 8 --channels 32 --grid 1024 --no-unfused)
      local dts=float,3xtf32,tf32,bf16,half
      timeout 120 "$build/bench/fused_block_tail_bench" "${micro[@]}" --dtypes $dts \
        > "$out/micro_after.txt" 2>&1
      say "micro-bench (this code): exit $?"
      grep '^[a-z0-9]* *fused\|^dtype\|^device' "$out/micro_after.txt" | tee -a "$summary"
      if [ -n "$base" ]; then
        for _ in $(seq 400); do [ -f "$base/.done" ] && break; sleep 1; done
        say "base build: exit $(cat "$base/.done" 2> /dev/null || echo missing)"
      fi
      if [ -x "$base/bench/fused_block_tail_bench" ]; then
        timeout 120 "$base/bench/fused_block_tail_bench" "${micro[@]}" --dtypes $dts \
          > "$out/micro_before.txt" 2>&1
        say "micro-bench (before): exit $?"
        grep '^[a-z0-9]* *fused' "$out/micro_before.txt" | tee -a "$summary"
        # and this code again, after the base: the spread between two runs
        timeout 120 "$build/bench/fused_block_tail_bench" "${micro[@]}" --dtypes $dts \
          > "$out/micro_after2.txt" 2>&1
        grep '^[a-z0-9]* *fused' "$out/micro_after2.txt" | sed 's/^/again: /' | tee -a "$summary"
      fi
      local b
      for b in after before; do
        local exe=$bench
        [ "$b" = before ] && exe=$base/apps/fno_bench
        [ -x "$exe" ] || continue
        timeout 150 "$exe" "${common[@]}" --policies none --precision fp32 \
          --json "$out/none_$b.json" > /dev/null 2> "$out/none_$b.log"
        say "fno_bench none fp32 ($b): exit $?"
        grep -h '^fno_bench' "$out/none_$b.log" | cut -c1-200 | tee -a "$summary"
      done
      FNO_BLOCK_TAIL_FP32=3xtf32 timeout 150 "$bench" "${common[@]}" --policies none \
        --precision fp32 --json "$out/none_3xtf32.json" > /dev/null 2> "$out/none_3xtf32.log"
      say "fno_bench none fp32 (3xTF32): exit $?"
      grep -h '^fno_bench' "$out/none_3xtf32.log" | cut -c1-200 | tee -a "$summary"
      gpu_tests_fused_errors
      memcheck_fused
      local m
      for m in ffma 3xtf32; do
        FNO_BLOCK_TAIL_FP32=$m timeout 150 "$build/apps/fno_train" --config configs/darcy.yaml \
          --out "$out/seed_fp32_$m" --set output.progress=none > "$out/seed_fp32_$m.log" 2>&1
        say "seed fp32 $m: exit $? $(tail -1 "$out/seed_fp32_$m/metrics.jsonl" | cut -c1-300)"
        rm -f "$out/seed_fp32_$m"/*.pt
      done
      ;;
    seed16)
      use_wheels
      local sd
      for sd in 0 1 2; do
        timeout 120 "$build/apps/fno_train" --config configs/darcy.yaml --out "$out/seed16_$sd" \
          --set training.seed=$sd --set output.progress=none > "$out/seed16_$sd.log" 2>&1
        say "fno_train seed $sd: exit $? $(cat "$out/seed16_$sd/summary.json" | cut -c1-400)"
        rm -f "$out/seed16_$sd"/*.pt
        # the same without the per-epoch checkpoints and the predictions (neuraloperator's
        # Trainer, as bench/neuralop_darcy.py runs it, writes neither)
        timeout 120 "$build/apps/fno_train" --config configs/darcy.yaml --out "$out/seed16_nockpt_$sd" \
          --set training.seed=$sd --set output.progress=none --set training.checkpoint_every=1000 \
          --set data.n_predictions=0 > "$out/seed16_nockpt_$sd.log" 2>&1
        say "fno_train seed $sd, checkpoint at the end only: exit $? $(cat "$out/seed16_nockpt_$sd/summary.json" | cut -c1-400)"
        rm -f "$out/seed16_nockpt_$sd"/*.pt
        timeout 120 python3 bench/neuralop_darcy.py --device cuda --seed $sd \
          >> "$out/seed16_neuralop.jsonl" 2> "$out/seed16_neuralop_$sd.log"
        say "neuraloperator seed $sd: exit $? $(tail -1 "$out/seed16_neuralop.jsonl" | cut -c1-400)"
      done
      ;;
    seednoise)
      # issue 14: the fp32 Darcy seed run (20 epochs) on each fp32 block-tail mode and on the
      # LibTorch path (FNO_FUSED=0), side by side
      local v name
      local -a runs=("ffma" "3xtf32" "unfused FNO_FUSED=0")
      for v in "${runs[@]}"; do
        local words=($v)
        name=$(echo "$v" | tr ' =' '__')
        (env FNO_BLOCK_TAIL_FP32=${words[0]} "${words[@]:1}" timeout 200 "$build/apps/fno_train" \
          --config configs/darcy.yaml --out "$out/seednoise_$name" --set output.progress=none \
          --set training.checkpoint_every=1000 --set data.n_predictions=0 \
          > "$out/seednoise_$name.log" 2>&1; echo $? > "$out/seednoise_$name.rc") &
      done
      wait
      for v in "${runs[@]}"; do
        name=$(echo "$v" | tr ' =' '__')
        rm -f "$out/seednoise_$name"/*.pt
        say "seed $v: exit $(cat "$out/seednoise_$name.rc") $(tail -1 "$out/seednoise_$name/metrics.jsonl" | cut -c1-300)"
      done
      ;;
    bar14)
      # issue 14's bar at 1024^2, batch 8, fp32, in one call: fno_bench none and auto under
      # 8 GiB, neuraloperator's step (bench/neuralop_step.py), the fused micro-benchmark
      "$bench" "${common[@]}" --policies none --precision fp32 --json "$out/bar_none.json" \
        > /dev/null 2> "$out/bar_none.log"
      say "fno_bench none fp32: exit $?"
      "$bench" "${common[@]}" --policies auto --gpu-memory-limit 8GiB --precision fp32 \
        --json "$out/bar_auto8.json" > /dev/null 2> "$out/bar_auto8.log"
      say "fno_bench auto 8GiB fp32: exit $?"
      grep -h '^fno_bench' "$out"/bar_*.log | cut -c1-200 | tee -a "$summary"
      use_wheels
      timeout 300 python3 bench/neuralop_step.py --resolution 1024 --batch 8 --steps "$steps" \
        >> "$out/neuralop_step.jsonl" 2> "$out/neuralop_step.log"
      say "neuralop_step: exit $?"
      tee -a "$summary" < "$out/neuralop_step.jsonl"
      timeout 120 "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
        --no-unfused --dtypes float,3xtf32,tf32,bf16,half > "$out/bar_micro.txt" 2>&1
      say "micro-bench: exit $?"
      grep '^[a-z0-9]* *fused\|^dtype\|^device' "$out/bar_micro.txt" | tee -a "$summary"
      ;;
    tcprof)
      # issue 14: Nsight Compute on the fp32 3xTF32 tensor-core backward (the fp32 default's
      # backward): issue rate, stall reasons, per-instruction stall samples (SASS)
      local ncu_bin
      ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      timeout 150 "$ncu_bin" -k "regex:backward_tc" --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
        --section InstructionStats --section ComputeWorkloadAnalysis --section SourceCounters \
        "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
        --dtypes 3xtf32 --no-unfused --reps 3 > "$out/ncu_3xtf32_backward_tc.txt" 2>&1
      say "ncu 3xtf32 backward_tc: exit $?"
      timeout 150 "$ncu_bin" -k "regex:backward_tc" --launch-skip 3 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
        "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
        --dtypes 3xtf32 --no-unfused --reps 3 > "$out/ncu_3xtf32_backward_tc_sass.csv" 2>&1
      say "ncu 3xtf32 backward_tc sass: exit $?"
      gzip -f "$out/ncu_3xtf32_backward_tc_sass.csv"
      grep -E 'Duration|Issue Slots Busy|Issued Ipc|Stall|Registers|Achieved Occupancy|Executed Instructions |DRAM Throughput|Warp Cycles Per Issued' \
        "$out/ncu_3xtf32_backward_tc.txt" | head -30 | tee -a "$summary"
      ;;
    k14prof)
      # issue 14: the micro-benchmark with the launch-tuning sweep, the cuBLASLt
      # epilogue probe, and Nsight Compute on the tensor-core kernels
      timeout 200 "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
        --dtypes 3xtf32,tf32,bf16,half --no-unfused --sweep > "$out/micro_sweep.txt" 2>&1
      say "micro-bench sweep: exit $?"
      grep -v '/l2:' "$out/micro_sweep.txt" | tee -a "$summary"
      if [ -x "$build/bench/mlp_epilogue_bench" ]; then
        timeout 150 "$build/bench/mlp_epilogue_bench" --batch 8 --grid 1024 --dtypes float,bf16 \
          > "$out/mlp_epilogue_bench.txt" 2>&1
        say "mlp epilogue bench: exit $?"
        grep -v 'no algorithm' "$out/mlp_epilogue_bench.txt" | tee -a "$summary"
      fi
      local ncu_bin dt k
      ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      for dt in float bf16; do
        for k in backward_tc forward_tc; do
          [ "$dt/$k" = float/forward_tc ] && continue
          timeout 120 "$ncu_bin" -k "regex:$k" --launch-skip 3 --launch-count 1 \
            --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
            --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats \
            --section InstructionStats \
            "$build/bench/fused_block_tail_bench" --batch 8 --channels 32 --grid 1024 \
            --dtypes "$dt" --no-unfused --reps 3 > "$out/ncu_${dt}_$k.txt" 2>&1
          say "ncu $dt $k: exit $?"
        done
      done
      ;;
    ddp)
      # issue 16, on two GPUs (nvidia-h200-x2; NCCL_NVLS_ENABLE=0 as that machine sets it):
      # the distributed CLI test with NCCL, then fno_bench under torchrun at 1024^2,
      # batch 8 per GPU: none, and auto under 8 GiB per GPU (one GPU measured in the same run)
      local torchrun
      torchrun=$(command -v torchrun || echo "")
      timeout 420 bash tests/cli/test_distributed.sh "$build/apps/fno_train" "$root" /tmp/ddp_cli cuda \
        "$torchrun" > "$out/ddp_cli.log" 2>&1
      say "ddp cli (NCCL): exit $? ($(tail -1 "$out/ddp_cli.log"))"
      cp /tmp/ddp_cli/faults.txt "$out/ddp_faults.txt" 2> /dev/null
      cp /tmp/ddp_cli/two/metrics.jsonl "$out/ddp_two_metrics.jsonl" 2> /dev/null
      cp /tmp/ddp_cli/one/metrics.jsonl "$out/ddp_one_metrics.jsonl" 2> /dev/null
      grep FAIL "$out/ddp_cli.log" | cut -c1-400 | tee -a "$summary"
      for run in "none" "auto --gpu-memory-limit 8GiB"; do
        local name=${run%% *}
        # shellcheck disable=SC2086
        timeout 300 "$torchrun" --no-python --nproc-per-node 2 "$bench" "${common[@]}" --policies $run \
          --json "$out/ddp_bench1024_$name.json" --csv "$out/ddp_bench1024_$name.csv" \
          > /dev/null 2> "$out/ddp_bench1024_$name.log"
        say "ddp bench $run: exit $? $(grep '^fno_bench: ' "$out/ddp_bench1024_$name.log" | cut -c1-200)"
      done
      ;;
    ddpgraphs)
      # several ranks under CUDA graphs (two graphs a step, the NCCL all-reduce between them),
      # on two GPUs: the distributed CLI test with NCCL (graphs auto: on; metrics against one
      # process, a killed, a stopped and a SIGTERMed rank), the seed run on 2 ranks with
      # training.cuda_graphs off and on (metrics, wall time), fno_bench under torchrun at
      # 64^2 and 128^2, batch 32 per GPU, fp32, --cuda-graphs off and on
      local torchrun g t1
      torchrun=$(command -v torchrun || echo "")
      mkdir -p "$out/ddpgraphs"
      # first on one GPU: the two-graph step over a one-rank NCCL sync against no sync
      timeout 120 "$build/tests/fno_gpu_tests" -tc="GPU graphs: a step over a gradient sync*" \
        > "$out/ddpgraphs/gpu_test.log" 2>&1
      say "ddp graphs GPU test: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/ddpgraphs/gpu_test.log" | tr '\n' ' '))"
      grep -h 'MESSAGE\|steps over' "$out/ddpgraphs/gpu_test.log" | cut -c1-200 | tee -a "$summary"
      timeout 300 bash tests/cli/test_distributed.sh "$build/apps/fno_train" "$root" /tmp/ddp_cli cuda \
        "$torchrun" > "$out/ddpgraphs/cli.log" 2>&1
      say "ddp cli (NCCL, graphs auto): exit $? ($(tail -1 "$out/ddpgraphs/cli.log"))"
      grep FAIL "$out/ddpgraphs/cli.log" | cut -c1-400 | tee -a "$summary"
      cp /tmp/ddp_cli/faults.txt "$out/ddpgraphs/faults.txt" 2> /dev/null
      grep -h "CUDA graphs\|cuda_graphs" /tmp/ddp_cli/two.err | head -3 | tee -a "$summary"
      for g in off on; do
        t1=$(date +%s%N)
        timeout 120 "$torchrun" --no-python --nproc-per-node 2 "$build/apps/fno_train" \
          --config configs/darcy.yaml --out "$out/ddpgraphs/seed_$g" --set data.batch_size=16 \
          --set training.cuda_graphs=$g --set output.progress=none > "$out/ddpgraphs/seed_$g.log" 2>&1
        say "2-rank seed run (batch 16 a rank), cuda_graphs $g: exit $? in" \
          "$((($(date +%s%N) - t1) / 1000000)) ms; $(grep -o '"metrics": {[^}]*}' "$out/ddpgraphs/seed_$g/summary.json")"
        grep -o '"seconds": [0-9.e+-]*' "$out/ddpgraphs/seed_$g/metrics.jsonl" | awk '{print $2}' |
          tr '\n' ' ' | tee -a "$summary"
        echo | tee -a "$summary"
      done
      for g in off on; do
        timeout 200 "$torchrun" --no-python --nproc-per-node 2 "$bench" --resolutions 64 128 \
          --batches 32 --policies none --precision fp32 --warmup 5 --steps 30 --cuda-graphs $g \
          --json "$out/ddpgraphs/bench_$g.json" --csv "$out/ddpgraphs/bench_$g.csv" \
          > /dev/null 2> "$out/ddpgraphs/bench_$g.log"
        say "ddp bench --cuda-graphs $g: exit $?"
        grep -h '^fno_bench: \|one GPU\|ranks' "$out/ddpgraphs/bench_$g.log" | cut -c1-220 | tee -a "$summary"
      done
      ;;
    tiled)
      # the tiled step (fno/tiled.h): its GPU tests, then bench/tiled_step_bench
      # against the whole-grid step at 2048^2 and 4096^2 (fp32, bf16)
      timeout 400 "$build/tests/fno_gpu_tests" -sf='*test_gpu_tiled*' > "$out/gpu_tests_tiled.log" 2>&1
      say "tiled tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/gpu_tests_tiled.log" | tr '\n' ' '))"
      grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests_tiled.log" | head -60
      grep -h 'MESSAGE' -A1 "$out/gpu_tests_tiled.log" | grep -v '^--' | cut -c1-300 | tee -a "$summary"
      local tb=$build/bench/tiled_step_bench
      for args in "--grid 2048 --plans whole,256:r/d/d/d:d,512:r/d/d/d:d,1024:r/d/d/d:d,512:r/h/h/h:d,512:r/h/h/h:h,512:r/r/h/r:d" \
                  "--grid 4096 --plans whole,512:r/h/h/h:d,1024:r/h/h/h:d,512:r/r/h/r:d,512:r/h/h/h:h" \
                  "--grid 4096 --precision bf16 --plans whole,512:r/h/h/h:d,1024:r/h/h/h:d,512:r/h/h/h:h" \
                  "--grid 4096 --compress bf16 --plans 512:r/h/h/h:d,512:r/h/h/h:h"; do
        # shellcheck disable=SC2086
        timeout 200 "$tb" $args --steps 3 > "$out/tiled_bench.tmp" 2>&1
        echo "tiled_step_bench $args: exit $?" | tee -a "$summary"
        tee -a "$summary" < "$out/tiled_bench.tmp"
        cat "$out/tiled_bench.tmp" >> "$out/tiled_bench.txt"
      done
      ;;
    prof)
      # one traced step (Kineto; CUDA graphs off) summed by kernel, with the host's CUDA
      # calls and the longest GPU idle gaps (bench/trace_kernels.py --gaps): issue 28's
      # 128^2 rows (batch 32, fp32 and bf16) and issue 26's 2048^2 row (batch 8, auto
      # under 2 GiB: eight one-sample tiled micro-batches)
      mkdir -p "$out/prof"
      for p in fp32 bf16; do
        timeout 200 "$bench" --resolutions 128 --batches 32 --policies none --precision $p \
          --cuda-graphs off --warmup 5 --steps 10 --trace "$out/prof/p128_$p.json" \
          > /dev/null 2> "$out/prof/p128_$p.log"
        say "== 128^2 b32 $p: exit $? $(grep '^fno_bench: ' "$out/prof/p128_$p.log" | cut -c1-120)"
        python3 bench/trace_kernels.py "$out/prof/p128_$p.json" --top 25 --gaps 5 --ops | tee -a "$summary"
        rm -f "$out/prof/p128_$p.json"
      done
      timeout 400 "$bench" --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 2GiB \
        --warmup 1 --steps 5 --trace "$out/prof/p2048.json" > /dev/null 2> "$out/prof/p2048.log"
      say "== 2048^2 b8 auto 2 GiB: exit $? $(grep '^fno_bench: ' "$out/prof/p2048.log" | cut -c1-200)"
      python3 bench/trace_kernels.py "$out/prof/p2048.json" --top 30 --gaps 8 --ops | tee -a "$summary"
      rm -f "$out/prof/p2048.json"
      ;;
    nsepoch)
      # issue 27: seconds per epoch of paper models (NSEPOCH_CONFIGS, by default
      # configs/ns_v1e-5_fno{3d,2d}.yaml, each with optional %KEY=VALUE sets as nstrain's; graphs on) on nsdata's set (the same NSDATA_*: run nsdata first, small), NSEPOCH_TRAIN
      # (100) training samples, NSEPOCH_EPOCHS (4) epochs, one evaluation at the end; first with
      # NSEPOCH_BASE_TRAIN (an fno_train built from the code before), when set
      local nu=${NSDATA_NU:-1e-3} tf=${NSDATA_T:-50} dir=${NSDATA_DIR:-/tmp/fno-nsdata}
      local stem ep=${NSEPOCH_EPOCHS:-4} cfg exe tag
      stem=$dir/ns_v${nu}_T${tf}
      mkdir -p "$out/nsepoch"
      if [ ! -f "${stem}_test.h5" ]; then
        say "nsepoch: no ${stem}_test.h5 (run nsdata with the same NSDATA_* first)"
        return
      fi
      local spec sets kv1 ranks base_cfg
      for spec in ${NSEPOCH_CONFIGS:-ns_v1e-5_fno3d ns_v1e-5_fno2d}; do
        # CFG%KEY=VALUE (repeatable): that --set for this config alone; CFG*N: on N GPUs
        # under torchrun, each rank a share of the config's batch (as nstrain's)
        ranks=$(ns_spec_ranks "$spec")
        base_cfg=${spec%%\%*} sets=()
        base_cfg=${base_cfg%%\**}
        cfg=$base_cfg
        [ "$ranks" -gt 1 ] && cfg+=_ranks$ranks
        [[ $spec == *%* ]] && IFS=% read -r -a sets <<< "${spec#*%}"
        ns_rank_split "$base_cfg" "$ranks" "nsepoch $cfg" || continue
        local extra=("${rank_args[@]}")
        for kv1 in "${sets[@]}"; do
          extra+=(--set "$kv1")
          cfg+=_$(set_tag "$kv1")
        done
        for tag in ${NSEPOCH_BASE_TRAIN:+base} now; do
          exe=$build/apps/fno_train
          [ "$tag" = base ] && exe=$NSEPOCH_BASE_TRAIN
          rm -rf "$dir/epoch_${cfg}_$tag"
          timeout 200 "${train_launcher[@]}" "$exe" --config "configs/$base_cfg.yaml" \
            --out "$dir/epoch_${cfg}_$tag" "${extra[@]}" \
            --set "data.train_file=${stem}_train.h5" --set "data.n_train=${NSEPOCH_TRAIN:-100}" \
            --set "data.test=[{file: ${stem}_test.h5, name: ns, n_samples: ${NSDATA_TEST:-200}, batch_size: 10}]" \
            --set "training.epochs=$ep" --set "training.eval_every=$ep" --set output.progress=none \
            > "$out/nsepoch/${cfg}_$tag.out" 2> "$out/nsepoch/${cfg}_$tag.log"
          say "nsepoch $cfg $tag: exit $? seconds per epoch: $(python3 -c 'import json,sys; print(" ".join("%.3f" % json.loads(l)["seconds"] for l in open(sys.argv[1])))' "$dir/epoch_${cfg}_$tag/metrics.jsonl" 2> /dev/null)"
          cp "$dir/epoch_${cfg}_$tag/metrics.jsonl" "$out/nsepoch/${cfg}_$tag.metrics.jsonl" 2> /dev/null
        done
      done
      ;;
    nsprof)
      # issue 27: the paper's Navier-Stokes models' training steps (FNO-3D at 64^2 x 10, batch
      # 10; one FNO-2D application at 64^2, batch 20), fp32: fno_bench none with graphs on and
      # off (and the FNO-3D with its middle dim by cuFFT, FNO_DFT_MIDDLE_DIM=0), then one traced
      # step (graphs off) summed by kernel with the launching ops; first, with NSPROF_BASE_BENCH
      # (an fno_bench built from the code before), that one, graphs on
      mkdir -p "$out/nsprof"
      local m b g
      for m in fno3d:10 fno2d:20; do
        b=${m#*:}
        m=${m%:*}
        for g in ${NSPROF_BASE_BENCH:+base} on off mid0; do
          local exe=$bench graphs=$g mid=1
          [ "$g" = base ] && exe=$NSPROF_BASE_BENCH graphs=on
          [ "$g" = mid0 ] && { [ "$m" = fno3d ] || continue; } && graphs=on mid=0
          FNO_DFT_MIDDLE_DIM=$mid timeout 120 "$exe" --config "configs/ns_v1e-5_$m.yaml" --resolutions 64 --batches "$b" \
            --policies none --cuda-graphs $graphs --warmup 5 --steps 20 \
            --json "$out/nsprof/${m}_$g.json" > /dev/null 2> "$out/nsprof/${m}_$g.log"
          say "== ns $m b$b graphs $g: exit $? $(grep '^fno_bench: ' "$out/nsprof/${m}_$g.log" | cut -c1-160)"
        done
        timeout 120 "$bench" --config "configs/ns_v1e-5_$m.yaml" --resolutions 64 --batches "$b" \
          --policies none --cuda-graphs off --warmup 5 --steps 10 \
          --trace "$out/nsprof/$m.json" > /dev/null 2> "$out/nsprof/${m}_trace.log"
        python3 bench/trace_kernels.py "$out/nsprof/$m.json" --top 30 --gaps 3 --ops \
          > "$out/nsprof/${m}_kernels.txt"
        head -45 "$out/nsprof/${m}_kernels.txt" | tee -a "$summary"
        rm -f "$out/nsprof/$m.json"
      done
      ;;
    mlpsan)
      mkdir -p "$out/mlpsan"
      mlp_sanitizers "$out/mlpsan"
      ;;
    nsmlp)
      # issue 27: width-20 blocks' channel MLPs on the fused channel-MLP kernels (FNO_FUSED_MLP=1)
      # against the LibTorch path (0): the GPU tests, then each NS model's step, interleaved twice
      mkdir -p "$out/nsmlp"
      timeout 300 "$build/tests/fno_gpu_tests" -tc='*width 20*,*channel MLP*' \
        > "$out/nsmlp/gpu_tests.log" 2>&1
      say "nsmlp tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/nsmlp/gpu_tests.log" | tr -s ' ' | tr '\n' ' '))"
      local m b r v
      mlp_sanitizers "$out/nsmlp"
      for r in a b; do
        for m in fno3d:10 fno2d:20; do
          b=${m#*:}
          m=${m%:*}
          for v in 0 1; do
            FNO_FUSED_MLP=$v timeout 120 "$bench" --config "configs/ns_v1e-5_$m.yaml" --resolutions 64 \
              --batches "$b" --policies none --cuda-graphs on --warmup 5 --steps 20 \
              --json "$out/nsmlp/${m}_mlp${v}_$r.json" > /dev/null 2> "$out/nsmlp/${m}_mlp${v}_$r.log"
            say "== ns $m b$b FNO_FUSED_MLP=$v ($r): exit $? $(grep '^fno_bench: ' "$out/nsmlp/${m}_mlp${v}_$r.log" | cut -c1-160)"
          done
        done
      done
      ;;
    tiledprof)
      # one traced step per plan (Kineto), summed by kernel (bench/trace_kernels.py)
      local tb=$build/bench/tiled_step_bench
      for args in "--grid 2048 --plans whole,512:r/d/d/d:d" "--grid 4096 --plans whole,512:r/h/h/h:d"; do
        local tag=prof$(echo "$args" | cut -d' ' -f2)
        # shellcheck disable=SC2086
        timeout 200 "$tb" $args --steps 2 --trace "$out/$tag" 2>&1 | tee -a "$summary"
        for f in "$out/$tag".*.json; do
          say "== $f"
          python3 bench/trace_kernels.py "$f" --top 30 | tee -a "$summary"
          rm -f "$f"  # (tens of MiB: the packed results must stay under 16 MiB)
        done
      done
      ;;
    ooc)
      # issue 26's rows, each ratio within this call: fno_bench none and auto under
      # small budgets (fp32 unless named)
      ooc_row 2048_none --resolutions 2048 --batches 8 --policies none
      ooc_row 2048_auto2 --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 2GiB
      ooc_row 4096_none --resolutions 4096 --batches 2 --policies none --precision fp32,bf16
      ooc_row 4096_auto4 --resolutions 4096 --batches 2 --policies auto --gpu-memory-limit 4GiB
      ooc_row 4096_auto4_bf16 --resolutions 4096 --batches 2 --policies auto \
        --gpu-memory-limit 4GiB --precision bf16
      ooc_row 4096b8_auto16 --resolutions 4096 --batches 8 --policies auto --gpu-memory-limit 16GiB
      ooc_row 8192_auto16 --resolutions 8192 --batches 1 --policies auto --gpu-memory-limit 16GiB
      ;;
    ooc2048)
      # issue 26's first row alone (2048^2, b8: none, and auto under 2 GiB), for changes to
      # the kernels the tiled step shares
      ooc_row 2048_none --resolutions 2048 --batches 8 --policies none
      ooc_row 2048_auto2 --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 2GiB
      ;;
    ooccurve)
      # issue 26's out-of-core curve: auto's step time against the GPU budget at 2048^2
      # (b8) and 4096^2 (b2), with the none rows of this call (ooc's rows hold the
      # 2 / 4 GiB points); notebooks/out_of_core.ipynb draws both
      ooc_row 2048_none --resolutions 2048 --batches 8 --policies none
      ooc_row 4096_none --resolutions 4096 --batches 2 --policies none
      ooc_row 2048_auto1 --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit 1GiB
      for g in 4 8 16; do
        ooc_row 2048_auto$g --resolutions 2048 --batches 8 --policies auto --gpu-memory-limit ${g}GiB
      done
      for g in 2 8 16; do
        ooc_row 4096_auto$g --resolutions 4096 --batches 2 --policies auto --gpu-memory-limit ${g}GiB
      done
      ;;
    tiledtests)
      timeout 400 "$build/tests/fno_gpu_tests" -sf='*test_gpu_tiled*' > "$out/gpu_tests_tiled.log" 2>&1
      say "tiled tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/gpu_tests_tiled.log" | tr '\n' ' '))"
      grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests_tiled.log" | head -60
      grep -h 'auto under' "$out/gpu_tests_tiled.log" | cut -c1-300 | tee -a "$summary"
      ;;
    ooc3d)
      # the 3D FNO of configs/poisson3d.yaml with modes 16^3 at 256^3, batch 1
      for run in "none" "auto --gpu-memory-limit 8GiB"; do
        local name=${run%% *}
        # shellcheck disable=SC2086
        timeout 400 "$bench" --config configs/poisson3d.yaml --set 'model.n_modes=[16,16,16]' \
          --resolutions 256 --batches 1 --warmup 1 --steps "$steps" --policies $run \
          --json "$out/ooc3d_$name.json" --csv "$out/ooc3d_$name.csv" > /dev/null \
          2> "$out/ooc3d_$name.log"
        say "ooc3d $run: exit $? $(grep '^fno_bench: ' "$out/ooc3d_$name.log" | cut -c1-330)"
      done
      ;;
    oocrun)
      # the whole fno_train run at 1024^2, batch 8, 64 + 8 samples, 3 epochs: none,
      # and auto under 4 GiB (its peak_gpu_bytes must stay under the budget)
      local d=$out/oocrun
      mkdir -p "$d"
      "$build/apps/fno_datagen" --resolution 1024 --samples 72 --test-samples 8 --seed 0 \
        --device cuda --out "$d/darcy1024.h5" > "$d/datagen.log" 2>&1
      say "oocrun datagen: exit $?"
      for run in "none" "auto --gpu-memory-limit 4GiB"; do
        local name=${run%% *}
        # shellcheck disable=SC2086
        timeout 300 "$build/apps/fno_train" --config configs/darcy.yaml --out "$d/$name" \
          --set "data.train_file=$d/darcy1024_train.h5" --set data.n_train=64 \
          --set data.batch_size=8 --set training.epochs=3 --set data.n_predictions=2 \
          --set "data.test=[{file: $d/darcy1024_test.h5, batch_size: 8}]" --offload $run \
          > "$d/$name.stdout" 2> "$d/$name.stderr"
        say "oocrun $run: exit $? $(tr '\n' ' ' < "$d/$name.stdout" | cut -c1-200)"
        grep -o '"peak_gpu_bytes": [0-9]*' "$d/$name/metrics.jsonl" | tr '\n' ' ' | tee -a "$summary"
        echo | tee -a "$summary"
      done
      ;;
    largestcurve)
      # the largest square grid auto trains at batch 1 under a 4 and a 16 GiB GPU (--cap caps
      # the allocator; auto's budget is what it leaves): a binary search over multiples of
      # 4096 up to 16384 (8192, 12288, 16384), fp32
      for g in 4 16; do
        timeout 110 "$bench" --resolutions 1024 --batches 1 --steps 1 --warmup 1 --policies auto \
          --cap ${g}GiB --find-largest --grid-step 4096 --grid-max 16384 \
          --json "$out/ooc/largest_cap$g.json" --csv "$out/ooc/largest_cap$g.csv" > /dev/null \
          2> "$out/ooc/largest_cap$g.log"
        say "largest cap ${g} GiB: exit $?"
        grep -h '^fno_bench: ' "$out/ooc/largest_cap$g.log" | cut -c1-200 | tee -a "$summary"
      done
      ;;
    nsgpu)
      # Navier-Stokes on CUDA: the smoke configs' data and both training modes (recurrent
      # FNO-2D, space-time FNO-3D); then the paper's protocol (nu 1e-3, 256^2 -> 64^2,
      # dt 1e-4, T 50) for 16 samples, timed
      local d=$out/ns
      mkdir -p "$d"
      "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 --resolution 16 --dt 1e-2 \
        --t-final 4 --record-every 0.5 --samples 40 --test-samples 8 --seed 0 --device cuda \
        --progress none --out "$d/ns_smoke.h5" > "$d/datagen_smoke.log" 2>&1
      say "ns smoke datagen (cuda): exit $?"
      for m in fno2d fno3d; do
        timeout 120 "$build/apps/fno_train" --config "configs/ns_smoke_$m.yaml" \
          --set "data.train_file=$d/ns_smoke_train.h5" \
          --set "data.test=[{file: $d/ns_smoke_test.h5, name: ns, batch_size: 8}]" \
          --set device.name=cuda --set output.progress=none --out "$d/smoke_$m" \
          > "$d/smoke_$m.stdout" 2> "$d/smoke_$m.stderr"
        say "ns smoke $m (cuda): exit $? $(tail -1 "$d/smoke_$m.stderr" | cut -c1-150)"
        head -1 "$d/smoke_$m/metrics.jsonl" | cut -c1-200 | tee -a "$summary"
        tail -1 "$d/smoke_$m/metrics.jsonl" | cut -c1-200 | tee -a "$summary"
      done
      local t0
      t0=$(date +%s)
      timeout 200 "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 --t-final 50 \
        --resolution 256 --subsample 4 --samples 16 --test-samples 0 --seed 0 --device cuda \
        --progress none --out "$d/ns_v1e-3_T50_16.h5" > "$d/datagen_protocol.log" 2>&1
      say "ns protocol datagen (nu 1e-3, T 50, 16 samples, cuda): exit $?," \
        "$(($(date +%s) - t0)) s; $(tail -1 "$d/datagen_protocol.log" | cut -c1-150)"
      ;;
    nsdata)
      # issue 27: a set of the FNO paper's Navier-Stokes table (NSDATA_NU, default 1e-3, with
      # NSDATA_T 50 records; 1e-4: 30, 1e-5: 20), resumable within one warm machine, solved
      # in float32 as the paper's ns_2d.py (NSDATA_PRECISION) with dt NSDATA_DT (1e-4, the
      # paper's). fno_datagen --resume keeps each finished batch (NSDATA_BATCH samples,
      # default up to 64, shared evenly over the workers: about 150 s at T 50 on an H100 in
      # float32, 2.3-2.4 s a sample) in
      # $dir/ns_v$NU_T$T.h5.partial/; timeout's SIGTERM at the deadline abandons the batches
      # in flight (exit 143) and the next call goes on after the kept ones. On a machine of
      # several GPUs, one worker per GPU (--worker K/N --device cuda:K) makes every N-th
      # batch, and a last run without workers writes the files once all are kept (the same
      # bytes as one run). The machine's disk lasts only while it stays warm (30 s after a
      # call, 30 min held at most), and ~1 GB cannot travel either way (64 MiB a call), so
      # the set completes only if a chain of calls on one machine makes all NSDATA_SAMPLES
      # (1200, NSDATA_TEST 200 of them for testing) samples
      # (docs/data.md#resumable-generation). NSDATA_RES, NSDATA_SUB and NSDATA_DEVICE (256,
      # 4, cuda) are for trying the suite small; NSDATA_GPUS caps the workers (on the CPU it
      # sets their number, default 1).
      local nu=${NSDATA_NU:-1e-3} tf=${NSDATA_T:-50} n=${NSDATA_SAMPLES:-1200}
      local dir=${NSDATA_DIR:-/tmp/fno-nsdata} d=$out/nsdata
      local data=$dir/ns_v${nu}_T${tf}.h5
      mkdir -p "$dir" "$d"
      kept_samples() {  # the samples in the kept batches (samples_FIRST_END.h5)
        ls "$data.partial" 2> /dev/null |
          sed -n 's/^samples_0*\([0-9][0-9]*\)_0*\([0-9][0-9]*\)\.h5$/\1 \2/p' |
          awk '{ s += $2 - $1 } END { print s + 0 }'
      }
      local before left t rc gpus
      before=$(kept_samples)
      left=$((${NSDATA_DEADLINE:-560} - ($(date +%s) - script_t0)))
      gpus=${NSDATA_GPUS:-1}  # (on the CPU: that many worker processes, for trying)
      if [ "${NSDATA_DEVICE:-cuda}" = cuda ]; then
        gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
        [ "$gpus" -ge 1 ] || gpus=1
        [ -n "${NSDATA_GPUS:-}" ] && [ "$NSDATA_GPUS" -lt "$gpus" ] && gpus=$NSDATA_GPUS
      fi
      # The batch: NSDATA_BATCH, or 64 and fewer so that the batches share out evenly over the
      # workers (1200 samples on 4 GPUs: 20 batches of 60, 5 a worker, where 64 gave 19 and left
      # one worker a batch short while the others made their fifth)
      local rounds batch=${NSDATA_BATCH:-}
      if [ -z "$batch" ]; then
        rounds=$(((n + gpus * 64 - 1) / (gpus * 64)))
        batch=$(((n + gpus * rounds - 1) / (gpus * rounds)))
      fi
      local gen=("$build/apps/fno_datagen" --problem ns --viscosity "$nu" --t-final "$tf"
        --dt "${NSDATA_DT:-1e-4}" --resolution "${NSDATA_RES:-256}" --subsample "${NSDATA_SUB:-4}"
        --samples "$n" --test-samples "${NSDATA_TEST:-200}" --seed 0
        --precision "${NSDATA_PRECISION:-float32}" --batch "$batch" --progress plain
        --resume --out "$data")
      if [ -f "${data%.h5}_train.h5" ] && [ -f "${data%.h5}_test.h5" ]; then
        say "nsdata: $data done already: $(ls -l "${data%.h5}"_t*.h5 | awk '{print $5, $9}' | tr '\n' ' ')"
      elif [ "$left" -lt 60 ]; then
        say "nsdata: $left s left before the deadline; not started ($before samples kept)"
      else
        t=$(date +%s)
        rc=0
        if [ "$gpus" -gt 1 ]; then
          local k pids=()
          for k in $(seq 0 $((gpus - 1))); do
            local dev=${NSDATA_DEVICE:-cuda}
            [ "$dev" = cuda ] && dev=cuda:$k
            timeout -s TERM -k 60 "$left" "${gen[@]}" --device "$dev" --worker "$k/$gpus" \
              > "$d/datagen$k.out" 2>> "$d/datagen$k.log" &
            pids+=($!)
          done
          for k in "${pids[@]}"; do wait "$k" || rc=$?; done
          # every batch kept: the files (no solve left; at once)
          if [ "$rc" = 0 ]; then
            "${gen[@]}" --device "${NSDATA_DEVICE:-cuda}" > "$d/datagen.out" 2>> "$d/datagen.log"
            rc=$?
          fi
        else
          timeout -s TERM -k 60 "$left" "${gen[@]}" --device "${NSDATA_DEVICE:-cuda}" \
            > "$d/datagen.out" 2>> "$d/datagen.log"
          rc=$?
        fi
        local after secs
        after=$(kept_samples)
        [ "$rc" = 0 ] && after=$n
        secs=$(($(date +%s) - t))
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$rc" "$secs" "$before" "$after" \
          "$gpus" >> "$dir/segments.tsv"
        cp "$dir/segments.tsv" "$d/"
        say "nsdata: exit $rc after $secs s on $gpus GPU(s); samples kept $before -> $after of $n" \
          "($(awk -v n=$((after - before)) -v s="$secs" 'BEGIN { if (n > 0) printf "%.2f s a sample", s / n; else print "none made" }'))"
        tail -1 "$d/datagen.log" 2> /dev/null | cut -c1-250 | tee -a "$summary"
      fi
      ;;
    nstrain)
      # issue 27: models of a row of the paper's Navier-Stokes table (NSTRAIN_CONFIG: one or
      # more of configs/*.yaml, space-separated, e.g. "ns_v1e-5_fno3d ns_v1e-5_fno2d"; CFG@SEED
      # trains CFG with training.seed SEED into nstrain_CFG_seedSEED, and a suffix
      # %KEY=VALUE sets KEY for that run, e.g. ns_v1e-4_fno2d@1%model.use_channel_mlp=false
      # into nstrain_ns_v1e-4_fno2d_seed1_use_channel_mlp-false; CFG*N trains on N GPUs, N
      # ranks under torchrun) on nsdata's set of that row (the same NSDATA_* settings); on a
      # machine of several GPUs each config trains on its own GPUs at the same time (the next
      # free ones, round robin), else one after another. Resumable within one warm machine: each run directory stays in NSDATA_DIR,
      # fno_train stops by SIGTERM at NSTRAIN_DEADLINE (555) s after this script started (a
      # checkpoint mid-epoch), and the next call resumes it. Their metrics.jsonl,
      # summary.json, config.yaml and segments.tsv come back in $OUT/nstrain_CONFIG/.
      # NSTRAIN_SET adds --set overrides (space-separated key=value, e.g. training.epochs=2).
      local cfgs gpus i=0 pids=() p n k devs
      read -r -a cfgs <<< "${NSTRAIN_CONFIG:-ns_v1e-3_fno3d}"
      gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
      [ "$gpus" -ge 1 ] || gpus=1
      for p in "${cfgs[@]}"; do
        n=$(ns_spec_ranks "$p")
        if ! [ "$n" -ge 1 ] 2> /dev/null || [ "$n" -gt "$gpus" ]; then
          say "nstrain $p: $n ranks, on $gpus GPU(s); not started"
          continue
        fi
        if [ "$gpus" -gt 1 ]; then
          devs=''
          for k in $(seq 0 $((n - 1))); do devs+=${devs:+,}$(((i + k) % gpus)); done
          (export CUDA_VISIBLE_DEVICES=$devs && ns_train_one "$p") &
          pids+=($!)
        else
          ns_train_one "$p"
        fi
        i=$((i + n))
      done
      for p in "${pids[@]}"; do wait "$p"; done
      ;;
    mlp)
      # the fused channel MLP (lifting, projection): its GPU tests, then fno_bench with it
      # (FNO_FUSED_MLP=1) and without (0) in this call: none at 1024^2 b8 (fp32, bf16),
      # none and auto under 2 GiB at 2048^2 b8
      timeout 300 "$build/tests/fno_gpu_tests" -tc='*channel MLP*' > "$out/gpu_tests_mlp.log" 2>&1
      say "mlp tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/gpu_tests_mlp.log" | tr '\n' ' '))"
      grep -B2 -A12 'ERROR\|FAILED' "$out/gpu_tests_mlp.log" | head -60
      for m in 0 1; do
        export FNO_FUSED_MLP=$m
        ooc_row mlp${m}_1024_none --resolutions 1024 --batches 8 --policies none \
          --precision fp32,bf16
        ooc_row mlp${m}_2048_none --resolutions 2048 --batches 8 --policies none
        ooc_row mlp${m}_2048_auto2 --resolutions 2048 --batches 8 --policies auto \
          --gpu-memory-limit 2GiB
      done
      unset FNO_FUSED_MLP
      ;;
    small)
      # issue 28's rows: fno_bench none at 64^2, 128^2, 256^2 (batch 32, fp32 and bf16, 30
      # steps), and the seed main command's whole-process wall time (fno_train, configs/darcy.yaml)
      small_bench "$out/small" small
      say "small: exit $?"
      grep -h '^fno_bench: ' "$out/small/small.log" | cut -c1-200 | tee -a "$summary"
      say "seed main command: $(seed_run "$out/small/seed")"
      tail -2 "$out/small/seed.log" | cut -c1-300 | tee -a "$summary"
      ;;
    dftgemm)
      mkdir -p "$out/dftgemm"
      timeout 300 python3 bench/dft_gemm_probe.py --triton > "$out/dftgemm/probe.jsonl" \
        2> "$out/dftgemm/probe.log"
      say "dftgemm: exit $?"
      cut -c1-160 "$out/dftgemm/probe.jsonl" | tee -a "$summary"
      ;;
    dftexpand)
      switch_ab FNO_DFT_EXPAND dftexpand expand
      ;;
    h1loss)
      # issue 28: the relative H1 loss by the fused kernels (cuda/h1_loss.cu) against the
      # LibTorch path (FNO_FUSED_LOSS=0): their GPU tests, memcheck and racecheck on them,
      # then fno_bench and the seed main command both ways
      mkdir -p "$out/h1loss"
      timeout 200 "$build/tests/fno_gpu_tests" -tc='*H1 loss*' > "$out/h1loss/gpu_tests.log" 2>&1
      say "h1loss tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/h1loss/gpu_tests.log" | tr -s ' ' | tr '\n' ' '))"
      local tool
      for tool in memcheck racecheck; do
        timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 \
          "$build/tests/fno_gpu_tests" -tc='*H1 loss: the relative*' \
          > "$out/h1loss/$tool.log" 2>&1
        say "h1loss $tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/h1loss/$tool.log" | head -1)"
      done
      switch_ab FNO_FUSED_LOSS h1loss loss
      ;;
    fork)
      # issue 28: a block's GELU read by its spectral conv and its tail, their gradients
      # added inside GELU's backward (one pass) or by autograd (FNO_GELU_FORK=0)
      switch_ab FNO_GELU_FORK fork fork
      ;;
    mlpbwd)
      # issue 28, in one call, fno_bench none at 64^2, 128^2, 256^2: the session's start
      # (the channel MLPs' backward through GELU(h)/dh tensors and weight-gradient GEMMs,
      # FNO_FUSED_MLP_BACKWARD=0; the first dim's modes by cuFFT, FNO_DFT_FIRST_DIM=0),
      # then the one-pass backward, then both; then memcheck and racecheck on the
      # channel-MLP GPU test's small grids
      mkdir -p "$out/mlpbwd"
      local v
      for v in 0,0 1,0 1,1; do
        (export FNO_FUSED_MLP_BACKWARD=${v%,*} FNO_DFT_FIRST_DIM=${v#*,} &&
          small_bench "$out/mlpbwd" "mlp${v%,*}_dft${v#*,}")
        say "FNO_FUSED_MLP_BACKWARD=${v%,*} FNO_DFT_FIRST_DIM=${v#*,}: exit $?"
        grep -h '^fno_bench: ' "$out/mlpbwd/mlp${v%,*}_dft${v#*,}.log" | cut -c1-120 |
          tee -a "$summary"
      done
      mlp_sanitizers "$out/mlpbwd"
      ;;
    moonshot)
      # issue 26's moonshot: 16384^2, batch 1, bf16, auto on the whole GPU (then with bf16
      # host storage)
      for c in none bf16; do
        ooc_row moon_16384_bf16_c$c --resolutions 16384 --batches 1 --policies auto \
          --precision bf16 --compress $c
      done
      ;;
    nsspeed)
      # issue 27: the Navier-Stokes generator at the paper's settings (nu 1e-3, dt 1e-4, 256^2
      # solved, 64^2 stored) over NSSPEED_T time units (default 1: 10^4 steps), float64 and
      # float32, batch 16/64/256 and the automatic batch (NSSPEED_BATCHES; "auto" with
      # NSSPEED_AUTO_SAMPLES = 512 samples), then without CUDA graphs (NSSPEED_NOGRAPH,
      # default batch 64). Seconds per sample at the paper's T = 50: the solve's time
      # (solve_seconds: GRF, writing and the process start left out) x 50 / T / samples.
      local d=$out/nsspeed T=${NSSPEED_T:-1}
      mkdir -p "$d"
      printf 'precision\tcuda_graph\tbatch\tsamples\texit\twall_s\tsolve_s\ts_per_sample_T50\tus_per_sample_step\n' \
        > "$d/nsspeed.tsv"
      ns_speed() {  # PRECISION on|off BATCH|auto
        local p=$1 g=$2 b=$3 n=$3 name="$1_$2_b$3" t1 rc wall batch solve
        local extra=(--batch "$b")
        if [ "$b" = auto ]; then n=${NSSPEED_AUTO_SAMPLES:-512}; extra=(); fi
        [ "$g" = off ] && extra+=(--no-cuda-graph)
        t1=$(date +%s%N)
        timeout 300 "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 --resolution 256 \
          --subsample 4 --dt 1e-4 --t-final "$T" --record-every 1 --samples "$n" --seed 0 \
          --device cuda --precision "$p" "${extra[@]}" --progress none \
          --out "$d/ns_$name.h5" > "$d/ns_$name.log" 2>&1
        rc=$?
        wall=$(awk -v t="$(($(date +%s%N) - t1))" 'BEGIN { printf "%.2f", t / 1e9 }')
        batch=$(sed -n 's/^batch //p' "$d/ns_$name.log")
        solve=$(sed -n 's/^solve_seconds //p' "$d/ns_$name.log")
        rm -f "$d/ns_$name.h5"
        if [ "$rc" = 0 ] && [ -n "$solve" ]; then
          awk -v p="$p" -v g="$g" -v b="$batch" -v n="$n" -v w="$wall" -v s="$solve" -v T="$T" \
            'BEGIN { printf "%s\t%s\t%s\t%s\t0\t%s\t%s\t%.3f\t%.3f\n", p, g, b, n, w, s,
                     s * 50 / T / n, s / (n * T * 1e4) * 1e6 }' >> "$d/nsspeed.tsv"
          say "ns 256^2 T=$T $p graph $g batch $batch ($b, $n samples): wall $wall s, solve $solve s:" \
            "$(tail -1 "$d/nsspeed.tsv" | cut -f8) s a sample at T=50," \
            "$(tail -1 "$d/nsspeed.tsv" | cut -f9) us a sample-step"
        else
          printf '%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n' "$p" "$g" "$b" "$n" "$rc" "$wall" >> "$d/nsspeed.tsv"
          say "ns 256^2 T=$T $p graph $g batch $b: exit $rc after $wall s; $(tail -1 "$d/ns_$name.log" | cut -c1-200)"
        fi
      }
      for p in float64 float32; do
        for b in ${NSSPEED_BATCHES:-16 64 256 auto}; do ns_speed "$p" on "$b"; done
      done
      for p in float64 float32; do
        for b in ${NSSPEED_NOGRAPH:-64}; do ns_speed "$p" off "$b"; done
      done
      ;;
    nsgen)
      # The fused Navier-Stokes step (data/src/cuda/ns_step.cu) against LibTorch's step:
      # fno_datagen --problem ns at the paper's settings (nu 1e-3, dt 1e-4, 256^2 solved, 64^2
      # stored), float32, 64 samples in one batch of 64, --t-final 1 (10^4 steps), CUDA graphs
      # on, with FNO_NS_FUSED=0 and =1 interleaved twice: the solver's seconds (solve_seconds)
      # and ms a step of the batch. The numbers' agreement is the GPU test's
      # (tests/test_gpu_ns.cpp), so the outputs are not kept.
      local d=$out/nsgen rep fused name t1 rc wall solve
      mkdir -p "$d"
      for rep in 1 2; do
        for fused in 0 1; do
          name=fused${fused}_$rep
          t1=$(date +%s%N)
          FNO_NS_FUSED=$fused timeout 300 "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 \
            --resolution 256 --subsample 4 --dt 1e-4 --t-final 1 --record-every 1 --samples 64 \
            --seed 0 --precision float32 --batch 64 --device cuda --progress none \
            --out "$d/ns_$name.h5" > "$d/ns_$name.log" 2>&1
          rc=$?
          wall=$(awk -v t="$(($(date +%s%N) - t1))" 'BEGIN { printf "%.2f", t / 1e9 }')
          solve=$(sed -n 's/^solve_seconds //p' "$d/ns_$name.log")
          rm -f "$d/ns_$name.h5"
          if [ "$rc" = 0 ] && [ -n "$solve" ]; then
            say "nsgen FNO_NS_FUSED=$fused (run $rep): wall $wall s, solve $solve s," \
              "$(awk -v s="$solve" 'BEGIN { printf "%.3f", s / 1e4 * 1e3 }') ms a step (batch 64)"
          else
            say "nsgen FNO_NS_FUSED=$fused (run $rep): exit $rc after $wall s;" \
              "$(tail -1 "$d/ns_$name.log" | cut -c1-200)"
          fi
        done
      done
      ;;
    nsooc)
      # issue 27 item 5: offload under Navier-Stokes. fno_bench on the space-time FNO-3D of
      # configs/ns_v1e-3_fno3d.yaml at 256^2 x T (T its t_out, 40; NSOOC_T overrides), batch
      # NSOOC_BATCH (4): none, and auto under NSOOC_BUDGETS GiB (4 8 16); JSON/CSV per run in
      # nsooc/ for notebooks/navier_stokes.ipynb (FNO_NB_NSOOC_DIR)
      local d=$out/nsooc b=${NSOOC_BATCH:-4} run
      local time_args=()
      [ -n "${NSOOC_T:-}" ] && time_args=(--time-length "$NSOOC_T")
      mkdir -p "$d"
      for run in none ${NSOOC_BUDGETS:-4 8 16}; do
        local name=none
        local policy=(--policies none)
        if [ "$run" != none ]; then
          name=auto$run
          policy=(--policies auto --gpu-memory-limit "${run}GiB")
        fi
        timeout 400 "$bench" --config configs/ns_v1e-3_fno3d.yaml "${time_args[@]}" \
          --resolutions 256 --batches "$b" --warmup 1 --steps "$steps" "${policy[@]}" \
          --json "$d/$name.json" --csv "$d/$name.csv" > /dev/null 2> "$d/$name.log"
        say "nsooc $name: exit $? $(grep '^fno_bench: ' "$d/$name.log" | cut -c1-330)"
        grep -h 'over budget\|offload auto: budget' "$d/$name.log" | cut -c1-300 | tee -a "$summary"
      done
      ;;
    graphs)
      mkdir -p "$out/graphs"
      timeout 240 "$build/tests/fno_gpu_tests" -tc='GPU graphs*' > "$out/graphs/gpu_tests.log" 2>&1
      say "graphs tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
        "$out/graphs/gpu_tests.log" | tr '\n' ' '))"
      grep -B2 -A12 'ERROR\|FAILED' "$out/graphs/gpu_tests.log" | head -60
      grep -h -A1 'MESSAGE' "$out/graphs/gpu_tests.log" | grep -v '^--\|MESSAGE' | cut -c1-250 |
        tee -a "$summary"
      for g in off on; do
        small_bench "$out/graphs" "bench_$g" --cuda-graphs $g
        say "bench --cuda-graphs $g: exit $?"
        grep -h '^fno_bench: ' "$out/graphs/bench_$g.log" | cut -c1-110 | tee -a "$summary"
      done
      for g in off on; do
        say "seed main command, cuda_graphs $g: $(seed_run "$out/graphs/seed_$g" \
          --set training.cuda_graphs=$g);" \
          "$(grep -o '"metrics": {[^}]*}' "$out/graphs/seed_$g/summary.json")"
        grep -o '"seconds": [0-9.e+-]*' "$out/graphs/seed_$g/metrics.jsonl" | awk '{print $2}' |
          tr '\n' ' ' | tee -a "$summary"
        echo | tee -a "$summary"
      done
      ;;
    graphs85)
      # the paper's s = 85 run (batch 20, 85^2), a few epochs each way
      local d=$out/graphs85 data=/tmp/paper_data epochs=${GRAPHS85_EPOCHS:-20}
      mkdir -p "$d" "$data"
      local t1
      t1=$(date +%s)
      [ -f "$data/darcy_s85_train.h5" ] ||
        "$build/apps/fno_datagen" --resolution 421 --subsample 5 --samples 1200 --test-samples 200 \
          --seed 0 --device cuda --progress none --out "$data/darcy_s85.h5" > "$d/datagen.log" 2>&1
      say "s85 data: $(($(date +%s) - t1)) s"
      for g in off on; do
        t1=$(date +%s%N)
        timeout 150 "$build/apps/fno_train" --config configs/darcy_paper_s85.yaml \
          --out "$d/run_$g" --set "data.train_file=$data/darcy_s85_train.h5" \
          --set "data.test=[{file: $data/darcy_s85_test.h5, name: '85', n_samples: 200, batch_size: 20}]" \
          --set training.epochs=$epochs --set training.cuda_graphs=$g --set output.progress=plain \
          > "$d/run_$g.log" 2>&1
        local rc=$? ms=$((($(date +%s%N) - t1) / 1000000))
        say "s85 $epochs epochs, cuda_graphs $g: exit $rc in $ms ms; $(tail -1 "$d/run_$g/metrics.jsonl" | cut -c1-160)"
        # 500 epochs: the process less its epochs, the first epoch (warm-up, captures), and
        # 499 times the mean of the others
        grep -o '"seconds": [0-9.e+-]*' "$d/run_$g/metrics.jsonl" | awk -v ms=$ms -v n=$epochs \
          '{ s += $2; if (NR == 1) first = $2 } END { rest = (s - first) / (n - 1);
             printf "  epochs %.2f s in all, the first %.3f s, the others %.4f s each; 500 epochs: about %.0f s\n",
                    s, first, rest, (ms / 1000 - s) + first + 499 * rest }' |
          tee -a "$summary"
      done
      ;;
    *) say "unknown suite $1" ;;
  esac
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
for suite in "$@"; do
  t=$(date +%s)
  run_suite "$suite"
  say "[$suite: $(($(date +%s) - t)) s]"
  pack
done
echo "===== summary"
cat "$summary"
