#!/usr/bin/env bash
# One row of the FNO paper's Navier-Stokes table in one lease of the GPU machine: `gpu.sh nsdata`
# then `gpu.sh nstrain`, in a process session of their own (setsid) so that they run on between
# the device tool's calls, and the calls that start them and wait for them
# (docs/data.md#the-fno-papers-navier-stokes-sets-on-the-gpu-machine).
#
#   bash scripts/ns_lease.sh start   the lease's first call: builds, starts the row, waits
#   bash scripts/ns_lease.sh wait    each later call, chained within 30 s: waits for the row (and
#                                    starts it again where the machine ended it: it resumes)
#   NS_LEASE_COLLECT=1 bash scripts/ns_lease.sh wait
#                                    the last call: also copies what comes back into $OUT:
#                                    nstrain.tgz (the runs), carry_*.tgz (NSTRAIN_CARRY=1's
#                                    unfinished runs), lease.tgz (logs, the side suites)
#
# The row: NSDATA_NU, NSDATA_T, NSTRAIN_CONFIG, NSTRAIN_CARRY, NSTRAIN_CARRY_IN as
# scripts/gpu/nsdata.sh and nstrain.sh take them (e.g. NSDATA_NU=1e-3 NSDATA_T=50 NSTRAIN_CONFIG="ns_v1e-3_fno3d*2 ns_v1e-3_fno2d*2").
# NS_LEASE_STOP (1540): training's SIGTERM, in seconds after the first call started (a lease is
# 30 minutes of device time: the machine's start, about a minute, comes before that call);
# NS_LEASE_CALL (575): the seconds a call waits at most (a call may run 600);
# NS_LEASE_SIDE: gpu.sh suites run in the first call beside the row, from a second build in
# /tmp/fno-gpu-build2 on GPUs the row also uses: "tests" on the last GPU, "ddpgraphs" on the two
# before it (no timing of theirs, or of the row's, is a measurement then).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
L=${NS_LEASE_DIR:-/tmp/ns-lease}
mode=${1:-}
stop=${NS_LEASE_STOP:-1540}
call_end=${NS_LEASE_CALL:-575}
mkdir -p "$L"
case "$mode" in
  start) date +%s > "$L/t0" ;;
  wait | row) [ -f "$L/t0" ] || { echo "ns_lease: no $L/t0: run 'start' first" >&2; exit 2; } ;;
  *) echo "usage: scripts/ns_lease.sh start|wait" >&2; exit 2 ;;
esac
t0=$(cat "$L/t0")
rel() { echo $(($(date +%s) - t0)); }

if [ "$mode" = row ]; then  # the detached part: the set, then the models
  echo $$ > "$L/row.pid"
  export FNO_TARGETS=${FNO_TARGETS:-fno_datagen fno_train}
  echo "row: nsdata from $(rel) s"
  NSDATA_DEADLINE=$((stop - 120 - $(rel))) OUT=$L/nsd bash scripts/gpu.sh nsdata > "$L/nsd.log" 2>&1
  echo "row: nsdata ended at $(rel) s: $(grep 'nsdata:' "$L/nsd.log" | tail -1)"
  echo "row: nstrain ${NSTRAIN_CONFIG:-} from $(rel) s, SIGTERM at $stop s"
  NSTRAIN_DEADLINE=$((stop - $(rel))) OUT=$L/nst bash scripts/gpu.sh nstrain > "$L/nst.log" 2>&1
  echo "row: nstrain ended at $(rel) s"
  touch "$L/row.done"
  exit 0
fi

row_alive() { [ -f "$L/row.pid" ] && kill -0 "$(cat "$L/row.pid")" 2> /dev/null; }
start_row() {
  # (a subshell's background job: this shell's wait does not wait for it)
  (setsid nohup bash scripts/ns_lease.sh row >> "$L/row.log" 2>&1 < /dev/null &)
  sleep 2
}

if [ "$mode" = start ]; then
  rm -f "$L/row.done" "$L/row.pid"
  echo "ns_lease: user $(whoami); $(nvidia-smi -L 2> /dev/null | wc -l) GPU(s)"
  FNO_TARGETS=${FNO_TARGETS:-fno_datagen fno_train} OUT=$L/m bash scripts/gpu.sh > "$L/m.log" 2>&1 ||
    { tail -30 "$L/m.log"; exit 1; }
  echo "ns_lease: built at $(rel) s"
  start_row
  if [ -n "${NS_LEASE_SIDE:-}" ]; then
    gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
    FNO_BUILD_DIR=/tmp/fno-gpu-build2 FNO_TARGETS='fno_gpu_tests fno_bench fno_train' OUT=$L/b \
      bash scripts/gpu.sh > "$L/b.log" 2>&1 || tail -30 "$L/b.log"
    left=$((call_end - SECONDS - 15))
    for suite in $NS_LEASE_SIDE; do
      case $suite in
        tests) devs=$((gpus - 1)) ;;
        ddpgraphs) devs=$((gpus - 3)),$((gpus - 2)) ;;
        *) echo "ns_lease: side suite '$suite' (tests or ddpgraphs) not run"; continue ;;
      esac
      (CUDA_VISIBLE_DEVICES=$devs FNO_BUILD_DIR=/tmp/fno-gpu-build2 FNO_TARGETS=fno_train \
        OUT=$L/side_$suite timeout "$left" bash scripts/gpu.sh "$suite" > "$L/side_$suite.log" 2>&1
        echo "ns_lease: side $suite ended at $(rel) s"
        cat "$L/side_$suite/results/summary.txt" 2> /dev/null | cut -c1-300) &
    done
    wait
  fi
elif [ ! -f "$L/row.done" ] && ! row_alive; then
  echo "ns_lease: the row was not running at $(rel) s: started again (it resumes)"
  start_row
fi
# (where the machine ends what a call leaves running, the row lives only as long as this call)
while [ ! -f "$L/row.done" ] && [ "$SECONDS" -lt "$call_end" ]; do sleep 5; done

echo "== ns_lease at $(rel) s: the row $(row_alive && echo running || echo 'not running')$([ -f "$L/row.done" ] && echo ', done')"
cat "$L/row.log" 2> /dev/null
grep -h 'nstrain\|nsdata' "$L/nst/results/summary.txt" 2> /dev/null | cut -c1-300
for f in "$L"/nst/results/nstrain_*/train.log; do
  [ -f "$f" ] && echo "$(basename "$(dirname "$f")"): $(tail -c 400 "$f" | tr '\r' '\n' | grep . | tail -1 | cut -c1-250)"
done
if [ "${NS_LEASE_COLLECT:-0}" = 1 ] && [ -n "${OUT:-}" ]; then
  cp "$L/nst/results.tgz" "$OUT/nstrain.tgz" 2> /dev/null
  cp "$L"/nst/carry_*.tgz "$OUT/" 2> /dev/null
  if [ "$(stat -c %s "$OUT/nstrain.tgz" 2> /dev/null || echo 0)" -gt 16000000 ]; then
    echo "ns_lease: nstrain.tgz over 16 MB: packed again without predictions.h5"
    tar -C "$L/nst" -czf "$OUT/nstrain.tgz" --exclude='*.h5' results
  fi
  (cd "$L" && tar -czf "$OUT/lease.tgz" --exclude='*.h5' --exclude='*.pt' --exclude=build.log \
    --exclude=configure.log row.log nsd.log nst.log nsd/results $(ls -d side_* 2> /dev/null))
  ls -l "$OUT"
fi
