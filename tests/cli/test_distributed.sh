#!/usr/bin/env bash
# fno_train as several processes (torch.distributed's c10d: Gloo on the CPU,
# NCCL on GPUs), launched as torchrun launches them:
#   1. two ranks on the seed config for 2 epochs give the metrics of one
#      process with the same global batch, within 1e-5 relative (through
#      torchrun --no-python when TORCHRUN is given, else by setting its variables);
#      with TORCHRUN, also as two hosts (--nnodes 2, c10d rendezvous, loopback);
#   2. a rank killed with SIGKILL makes the other exit non-zero within 60 s,
#      naming the rank that stopped; the same when the killed rank hosts the store;
#   3. a rank that hangs (SIGSTOP) makes the other stop after distributed.timeout_s;
#   4. SIGTERM to one rank stops both after the same step; the checkpoint
#      resumes in one process (another number of ranks) and ends as the
#      uninterrupted run;
#   5. one-line errors: a MASTER_PORT in use, a WORLD_SIZE larger than the
#      ranks started, RANK outside WORLD_SIZE, a distributed.domain_parallel
#      that does not divide the world size.
#   test_distributed.sh FNO_TRAIN SOURCE_DIR WORK_DIR [cpu|cuda] [TORCHRUN]
set -u
bin=$1 src=$2 work=$3 device=${4:-cpu} torchrun=${5:-}
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
seed=$src/configs/darcy.yaml
export OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1
# A port per test (the kernel's ephemeral range is above these).
base=$((20000 + $$ % 20000))
port() { echo $((base + $1)); }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
common=(--set "device.name=$device" --set output.progress=plain --set offload.plan_cache=none)

# launch PORT WORLD RANK OUT ARGS...: one rank in the background, its pid in $!.
launch() {
  local p=$1 w=$2 r=$3 out=$4; shift 4
  MASTER_PORT=$p WORLD_SIZE=$w RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w \
    "$bin" "$@" > "$out.out" 2> "$out.err" &
}

# first_epoch DIR: waits (up to 60 s) until DIR's first epoch is logged: every
# rank is training. It polls often: a GPU epoch of the seed config takes 0.5 s.
first_epoch() {
  for _ in $(seq 1 3000); do
    [ -s "$1/metrics.jsonl" ] && return
    sleep 0.02
  done
}

# metrics_close A B TOL: every number of every line of A's metrics.jsonl is
# within TOL (relative) of B's, except seconds and peak memory.
metrics_close() {
  awk -v tol="$3" '
    function parse(line, arr,   n, i, kv, parts) {
      gsub(/[{} "]/, "", line); n = split(line, parts, ",")
      for (i = 1; i <= n; i++) { split(parts[i], kv, ":"); arr[kv[1]] = kv[2] }
    }
    NR == FNR { a[FNR] = $0; next }
    {
      delete x; delete y; parse(a[FNR], x); parse($0, y); lines++
      for (k in y) {
        if (k == "seconds" || k == "peak_gpu_bytes") continue
        if (!(k in x)) { print "missing " k; bad = 1; continue }
        d = x[k] - y[k]; if (d < 0) d = -d
        s = y[k] < 0 ? -y[k] : y[k]
        if (d > tol * s + 1e-12) { printf "epoch line %d: %s %.10g vs %.10g\n", FNR, k, x[k], y[k]; bad = 1 }
      }
    }
    END { if (lines == 0) { print "no metrics"; bad = 1 } exit bad }' "$1/metrics.jsonl" "$2/metrics.jsonl"
}

# 1. Two ranks against one process with the same global batch.
"$bin" --config "$seed" --out "$work/one" "${common[@]}" --set training.epochs=2 \
  > "$work/one.out" 2> "$work/one.err" || bad "one process: $(tail -3 "$work/one.err")"
if [ -n "$torchrun" ]; then
  "$torchrun" --no-python --nproc-per-node 2 --master-port "$(port 1)" "$bin" --config "$seed" \
    --out "$work/two" "${common[@]}" --set training.epochs=2 --set data.batch_size=16 \
    > "$work/two.out" 2> "$work/two.err"
  rc=$?
else
  launch "$(port 1)" 2 1 "$work/two1" --config "$seed" --out "$work/two" "${common[@]}" \
    --set training.epochs=2 --set data.batch_size=16
  p1=$!
  MASTER_PORT=$(port 1) WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$bin" --config "$seed" --out "$work/two" \
    "${common[@]}" --set training.epochs=2 --set data.batch_size=16 > "$work/two.out" 2> "$work/two.err"
  rc=$?
  wait "$p1" || rc=$?
fi
if [ "$rc" -eq 0 ] && grep -q "rank 0 of 2" "$work/two.err"; then ok; else bad "two ranks exited $rc: $(tail -3 "$work/two.err")"; fi
if metrics_close "$work/two" "$work/one" 1e-5 > "$work/compare.txt"; then ok; else bad "two ranks vs one process: $(cat "$work/compare.txt")"; fi
grep -q '"world_size": 2' "$work/two/summary.json" && ok || bad "summary.json lacks world_size 2"

# 1b. Two hosts as torchrun starts them (--nnodes 2, c10d rendezvous), here two
#     node agents on one machine over loopback, one rank each: the metrics of 1.
if [ -n "$torchrun" ]; then
  for node in 0 1; do
    # Each host's one rank is its LOCAL_RANK 0: on GPUs, each "host" its own GPU.
    [ "$device" = cuda ] && export CUDA_VISIBLE_DEVICES=$node
    "$torchrun" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "127.0.0.1:$(port 10)" --rdzv-id "fno-two-hosts-$$" --no-python "$bin" \
      --config "$seed" --out "$work/nodes" "${common[@]}" --set training.epochs=2 \
      --set data.batch_size=16 > "$work/node$node.out" 2> "$work/node$node.err" &
    pids[node]=$!
  done
  [ "$device" = cuda ] && unset CUDA_VISIBLE_DEVICES
  rc=0
  for node in 0 1; do wait "${pids[node]}" || rc=$?; done
  if [ "$rc" -eq 0 ] && cat "$work"/node?.err | grep -q "rank 0 of 2"; then ok; else bad "two node agents exited $rc: $(tail -n 3 "$work/node0.err")"; fi
  if metrics_close "$work/nodes" "$work/one" 1e-5 > "$work/compare_nodes.txt"; then ok; else bad "two hosts vs one process: $(cat "$work/compare_nodes.txt")"; fi
fi

# 2. SIGKILL to one rank: the other exits 5 within 60 s, naming it.
long=(--config "$seed" "${common[@]}" --set training.epochs=500 --set data.n_train=256 --set data.batch_size=8
  --set distributed.timeout_s=30)
for victim in 1 0; do
  survivor=$((1 - victim))
  launch "$(port $((2 + victim)))" 2 0 "$work/kill${victim}_r0" --out "$work/kill$victim" "${long[@]}"
  r0=$!
  launch "$(port $((2 + victim)))" 2 1 "$work/kill${victim}_r1" --out "$work/kill$victim" "${long[@]}"
  r1=$!
  first_epoch "$work/kill$victim"
  pids=("$r0" "$r1")
  kill -9 "${pids[$victim]}"
  t0=$(now_ms)
  rc=0
  wait "${pids[$survivor]}" || rc=$?
  ms=$(($(now_ms) - t0))
  err=$work/kill${victim}_r$survivor.err
  last=$(tail -1 "$err")
  if [ "$rc" -eq 5 ] && [ "$ms" -lt 60000 ] && echo "$last" | grep -q "^fno_train: rank $survivor: .*failed.*rank $victim"; then
    ok
  else
    bad "rank $victim killed: rank $survivor exited $rc after $ms ms: $last"
  fi
  echo "kill rank $victim: rank $survivor exited $rc after $ms ms: $last" >> "$work/faults.txt"
  wait 2> /dev/null
done

# 3. A rank that hangs: the other stops after the timeout.
launch "$(port 4)" 2 0 "$work/hang_r0" --out "$work/hang" "${long[@]}" --set distributed.timeout_s=10
r0=$!
launch "$(port 4)" 2 1 "$work/hang_r1" --out "$work/hang" "${long[@]}" --set distributed.timeout_s=10
r1=$!
first_epoch "$work/hang"
kill -STOP "$r1"
t0=$(now_ms)
rc=0
wait "$r0" || rc=$?
ms=$(($(now_ms) - t0))
kill -9 "$r1"
wait 2> /dev/null
last=$(tail -1 "$work/hang_r0.err")
if [ "$rc" -eq 5 ] && [ "$ms" -lt 60000 ] && echo "$last" | grep -q "^fno_train: rank 0: .*failed.*rank 1"; then
  ok
else
  bad "rank 1 stopped: rank 0 exited $rc after $ms ms: $last"
fi
echo "SIGSTOP rank 1: rank 0 exited $rc after $ms ms: $last" >> "$work/faults.txt"

# 4. SIGTERM to rank 0 alone: both ranks stop after the same step (143), and
#    one process with the same global batch resumes to the metrics of 1. (The
#    run is long, and the signal goes as soon as epoch 1 is logged: on a GPU
#    an epoch takes half a second.)
launch "$(port 5)" 2 0 "$work/term_r0" --config "$seed" --out "$work/term" "${common[@]}" \
  --set training.epochs=100 --set data.batch_size=16
r0=$!
launch "$(port 5)" 2 1 "$work/term_r1" --config "$seed" --out "$work/term" "${common[@]}" \
  --set training.epochs=100 --set data.batch_size=16
r1=$!
first_epoch "$work/term"
kill -TERM "$r0"
rc0=0 rc1=0
wait "$r0" || rc0=$?
wait "$r1" || rc1=$?
if [ "$rc0" -eq 143 ] && [ "$rc1" -eq 143 ]; then ok; else bad "SIGTERM: ranks exited $rc0 and $rc1: $(tail -1 "$work/term_r1.err")"; fi
"$bin" --resume "$work/term" --set data.batch_size=32 --set training.epochs=2 > "$work/resume.out" 2> "$work/resume.err" ||
  bad "resume in one process: $(tail -2 "$work/resume.err")"
if metrics_close "$work/term" "$work/one" 1e-5 > "$work/compare_resume.txt"; then ok; else
  bad "resumed by one process vs one process: $(cat "$work/compare_resume.txt")"
fi

# 5. One-line errors.
small=(--config "$src/tests/cli/small.yaml" "${common[@]}" --set distributed.timeout_s=5)
launch "$(port 6)" 2 0 "$work/busy_a" --out "$work/busy_a" "${small[@]}"
busy=$!
sleep 1
MASTER_PORT=$(port 6) WORLD_SIZE=2 RANK=0 expect 5 "rank 0: MASTER_PORT $(port 6) is already in use" -- --out "$work/busy_b" "${small[@]}"
kill -9 "$busy"
wait 2> /dev/null
launch "$(port 7)" 3 1 "$work/w3_r1" --out "$work/w3" "${small[@]}"
r1=$!
MASTER_PORT=$(port 7) WORLD_SIZE=3 RANK=0 expect 5 "rank 0: rendezvous .* WORLD_SIZE=3 failed" -- --out "$work/w3" "${small[@]}"
rc=0
wait "$r1" || rc=$?
[ "$rc" -eq 5 ] && [ "$(wc -l < "$work/w3_r1.err")" -eq 1 ] && ok || bad "WORLD_SIZE=3, rank 1 exited $rc: $(cat "$work/w3_r1.err")"
MASTER_PORT=$(port 8) WORLD_SIZE=2 RANK=2 expect 5 "RANK=2 is outside 0..1" -- --out "$work/r2" "${small[@]}"
# distributed.domain_parallel: refused before any rank waits for another.
MASTER_PORT=$(port 9) WORLD_SIZE=2 RANK=0 expect 2 "distributed.domain_parallel: 3 does not divide the world size 2" -- --out "$work/dp3" "${small[@]}" --set distributed.domain_parallel=3
# (domain_parallel's own refusals: test_domain.sh.)
MASTER_PORT=$(port 8) WORLD_SIZE=two RANK=0 expect 5 "WORLD_SIZE='two' is not an integer" -- --out "$work/r2" "${small[@]}"

finish test_distributed
