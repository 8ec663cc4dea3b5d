#!/bin/bash
# The fourteenth session's x4 lease: the nu = 1e-3 row of the paper's Navier-Stokes table.
#   bash .carry/lease.sh start   call 1: builds, starts pipe.sh detached, and beside it the GPU
#                                suite, gpu.sh ddpgraphs and a precheck of the FNO-2D rollout on
#                                two ranks under CUDA graphs
#   bash .carry/lease.sh wait    a later call: waits for pipe.sh (restarts it where the machine
#                                killed it), CALL_END s at most; with COLLECT=1 packs what came
set -u
L=/tmp/lease MODE=${1:-start}
mkdir -p $L
[ "$MODE" = start ] && date +%s > $L/t0
T0=$(cat $L/t0)
CALL_END=${CALL_END:-580} T_STOP=${T_STOP:-1540}
rel() { echo $(($(date +%s) - T0)); }
pipe_alive() { [ -f $L/pipe.pid ] && kill -0 "$(cat $L/pipe.pid)" 2> /dev/null; }
start_pipe() {
  # (a subshell's background job: this shell's wait does not wait for it)
  (setsid nohup bash .carry/pipe.sh "$T0" "$T_STOP" >> $L/pipe.log 2>&1 < /dev/null &)
  sleep 2
}
B=/tmp/fno-gpu-build B2=/tmp/fno-gpu-build2

precheck() {  # the FNO-2D rollout on two ranks (batch 10 each) against one (20), graphs on
  local C=$L/chk r1 r2
  mkdir -p $C
  CUDA_VISIBLE_DEVICES=3 timeout 120 $B/apps/fno_datagen --problem ns --viscosity 1e-3 \
    --t-final 50 --dt 1e-3 --resolution 64 --subsample 1 --samples 80 --test-samples 20 \
    --seed 0 --device cuda --progress none --out $C/ns.h5 > $C/datagen.log 2>&1 ||
    { echo "precheck: datagen exit $?: $(tail -1 $C/datagen.log)"; return; }
  local a=(--config configs/ns_v1e-3_fno2d.yaml --set data.train_file=$C/ns_train.h5
    --set "data.test=[{file: $C/ns_test.h5, name: ns, n_samples: 20, batch_size: 10}]"
    --set data.n_train=60 --set training.epochs=5 --set training.eval_every=5
    --set output.progress=none)
  CUDA_VISIBLE_DEVICES=3 timeout 150 $B/apps/fno_train "${a[@]}" --out $C/one > $C/one.log 2>&1
  r1=$?
  CUDA_VISIBLE_DEVICES=2,3 timeout 200 torchrun --no-python --standalone --nproc-per-node 2 \
    $B/apps/fno_train "${a[@]}" --set data.batch_size=10 --out $C/two > $C/two.log 2>&1
  r2=$?
  echo "precheck: one rank exit $r1 $(grep -o '"metrics": {[^}]*}' $C/one/summary.json 2> /dev/null)"
  echo "precheck: two ranks exit $r2 $(grep -o '"metrics": {[^}]*}' $C/two/summary.json 2> /dev/null)"
  grep -h 'eagerly\|CUDA graphs' $C/one.log $C/two.log | cut -c1-300 | head -6
  if [ "$r2" = 0 ] && ! grep -q eagerly $C/two.log; then
    echo 'ns_v1e-3_fno2d*2' > $L/fno2d_spec
  else
    echo 'ns_v1e-3_fno2d' > $L/fno2d_spec
  fi
  echo "precheck: FNO-2D as $(cat $L/fno2d_spec) at $(rel) s"
}

progress() {
  echo "== at $(rel) s: pipe $(pipe_alive && echo alive || echo 'not running')$([ -f $L/pipe.done ] && echo ', done')"
  cat $L/pipe.log 2> /dev/null
  tail -c 300 $L/nsd/results/nsdata/datagen0.log 2> /dev/null | tr '\r' '\n' | tail -2
  grep -h 'nstrain\|nsdata' $L/nst/results/summary.txt 2> /dev/null | cut -c1-300
  for f in $L/nst/results/nstrain_*/train.log; do
    [ -f "$f" ] && echo "$f: $(tail -c 400 "$f" | tr '\r' '\n' | grep . | tail -1 | cut -c1-250)"
  done
  ls $L/nsd/nsdata 2> /dev/null | head -0
}

if [ "$MODE" = start ]; then
  echo "user $(whoami); $(nvidia-smi -L | wc -l) GPUs: $(nvidia-smi -L | head -1)"
  FNO_TARGETS='fno_datagen fno_train' OUT=$L/m bash scripts/gpu.sh > $L/m.log 2>&1 ||
    { tail -30 $L/m.log; exit 1; }
  echo "main built at $(rel) s"
  start_pipe
  precheck > $L/precheck.txt 2>&1 &
  pc=$!
  FNO_BUILD_DIR=$B2 FNO_TARGETS='fno_gpu_tests fno_bench fno_train' OUT=$L/b bash scripts/gpu.sh \
    > $L/b.log 2>&1 || tail -30 $L/b.log
  echo "tests built at $(rel) s ($(grep 'build:' $L/b.log))"
  left=$((CALL_END - SECONDS - 15))
  (CUDA_VISIBLE_DEVICES=1,2 FNO_BUILD_DIR=$B2 FNO_TARGETS=fno_train OUT=$L/d \
    timeout $left bash scripts/gpu.sh ddpgraphs > $L/d.log 2>&1; echo "ddpgraphs done at $(rel) s") &
  sleep 5
  (CUDA_VISIBLE_DEVICES=3 FNO_BUILD_DIR=$B2 FNO_TARGETS=fno_gpu_tests OUT=$L/t \
    timeout $((left - 5)) bash scripts/gpu.sh tests > $L/t.log 2>&1; echo "tests done at $(rel) s") &
  wait
  cat $L/precheck.txt
  for f in d t; do echo "== $f"; cat $L/$f/results/summary.txt 2> /dev/null | cut -c1-400; done
elif [ ! -f $L/pipe.done ] && ! pipe_alive; then
  echo "pipe not running at $(rel) s: started again"
  start_pipe
fi
# (where the machine kills what a call leaves running, pipe.sh lives only as long as this call)
while [ ! -f $L/pipe.done ] && [ $SECONDS -lt "$CALL_END" ]; do sleep 5; done
progress
if [ "${COLLECT:-0}" = 1 ]; then
  # what comes back: the runs' results.tgz, any carried checkpoint, one tgz of the rest
  cp $L/nst/results.tgz "$OUT/nstrain.tgz" 2> /dev/null
  cp $L/nst/carry_*.tgz "$OUT/" 2> /dev/null
  s=$(stat -c %s "$OUT/nstrain.tgz" 2> /dev/null || echo 0)
  if [ "$s" -gt 16000000 ]; then
    echo "nstrain.tgz is $s bytes: packed again without predictions"
    tar -C $L/nst -czf "$OUT/nstrain.tgz" --exclude='*.h5' results
  fi
  (cd $L && tar -czf "$OUT/lease.tgz" --exclude='*.h5' --exclude='*.pt' --exclude=build.log \
    --exclude=configure.log pipe.log precheck.txt nsd.log nst.log nsd/results chk/*.log \
    chk/one/summary.json chk/two/summary.json chk/one/metrics.jsonl chk/two/metrics.jsonl \
    t/results d/results t.log d.log 2> /dev/null)
  ls -l "$OUT"
fi
