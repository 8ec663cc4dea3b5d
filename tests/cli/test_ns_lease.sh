#!/usr/bin/env bash
# scripts/ns_lease.sh on the CPU, tiny (a 32^2 set of 12 samples, 6 epochs of the nu = 1e-4
# FNO-2D, one thread): the first call starts the row in its own session and returns while it
# runs; the row is killed, as a machine that ends what a call leaves behind would; the next call
# starts it again, and it resumes (the kept set) to epoch 6; the last call's collection holds
# the run's metrics and the logs.
#   test_ns_lease.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -u
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work/out"
bin=bash
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export FNO_BUILD_DIR=$build NS_LEASE_DIR=$work/lease NSDATA_DIR=$work/data NSDATA_DEVICE=cpu \
  NSDATA_RES=32 NSDATA_SUB=1 NSDATA_SAMPLES=12 NSDATA_TEST=4 NSDATA_VAL=2 NSDATA_DT=2e-3 NSDATA_NU=1e-4 \
  NSDATA_T=30 NSTRAIN_CONFIG=ns_v1e-4_fno2d \
  NSTRAIN_SET="training.epochs=6 data.n_train=8 data.batch_size=4 training.checkpoint_every=1" \
  OMP_NUM_THREADS=1
cd "$src" || exit 1

NS_LEASE_CALL=2 bash scripts/ns_lease.sh start > "$work/call1.out" 2>&1
sid=$(cat "$work/lease/row.pid" 2> /dev/null)
if [ -n "$sid" ] && kill -0 "$sid" 2> /dev/null; then
  ok
  pkill -KILL -s "$sid"
  for _ in $(seq 1 40); do [ -z "$(ps -o pid= -s "$sid")" ] && break; sleep 0.5; done
  [ -z "$(ps -o pid= -s "$sid")" ] && ok || bad "the row's session outlived SIGKILL: $(ps -o pid,comm -s "$sid")"
else
  bad "no row running after the first call: $(cat "$work/call1.out")"
fi
[ ! -f "$work/lease/row.done" ] && ok || bad "the row ended before it was killed"

NS_LEASE_CALL=500 NS_LEASE_COLLECT=1 OUT=$work/out bash scripts/ns_lease.sh wait > "$work/call2.out" 2>&1
grep -q 'started again' "$work/call2.out" && ok || bad "the second call did not start the row again: $(head -3 "$work/call2.out")"
[ -f "$work/lease/row.done" ] && ok || bad "the row did not end: $(tail -5 "$work/call2.out")"
[ "$(grep -c '^row: nsdata from' "$work/lease/row.log")" -eq 2 ] && ok ||
  bad "row.log: $(cat "$work/lease/row.log")"
mkdir -p "$work/unpacked" && tar -xzf "$work/out/nstrain.tgz" -C "$work/unpacked" 2> /dev/null
m=$work/unpacked/results/nstrain_ns_v1e-4_fno2d/metrics.jsonl
[ -f "$m" ] && [ "$(sed -n '$p' "$m" | grep -c '"epoch": 6,')" -eq 1 ] && ok ||
  bad "nstrain.tgz: no metrics to epoch 6: $(tail -1 "$m" 2> /dev/null)"
# NSDATA_VAL: 2 validation samples after the 4 test ones, evaluated as their own set.
[ -f "$m" ] && sed -n '$p' "$m" | grep -q '"val_l2": ' && sed -n '$p' "$m" | grep -q '"ns_l2": ' && ok ||
  bad "no val_l2 beside ns_l2: $(tail -1 "$m" 2> /dev/null | cut -c1-300)"
[ "$(grep -c '"epoch": ' "$m" 2> /dev/null)" -eq 6 ] && ok || bad "metrics.jsonl: not one line per epoch"
grep -q '"ns_l2":' "$work/unpacked/results/nstrain_ns_v1e-4_fno2d/summary.json" 2> /dev/null && ok ||
  bad "no summary.json with ns_l2"
tar -tzf "$work/out/lease.tgz" 2> /dev/null | grep -q '^row.log$' && ok || bad "lease.tgz lacks row.log"
# bad use: one line, exit 2
bin=bash work=$work/expect
mkdir -p "$work"
expect 2 'usage: scripts/ns_lease.sh start|wait' -- "$src/scripts/ns_lease.sh" go
export NS_LEASE_DIR=$work/none
expect 2 "no $work/none/t0: run 'start' first" -- "$src/scripts/ns_lease.sh" wait
finish test_ns_lease
