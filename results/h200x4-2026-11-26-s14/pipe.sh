#!/bin/bash
# Detached (setsid) on the lease's machine, so that it outlives the call that starts it: the
# nu = 1e-3 set on every GPU, then its two models, FNO-3D and FNO-2D on two GPUs each.
# Arguments: T0 (the lease's first second) and T_STOP (training's SIGTERM, seconds after T0).
set -u
T0=$1 T_STOP=$2 L=/tmp/lease
echo $$ > $L/pipe.pid
rel() { echo $(($(date +%s) - T0)); }
export NSDATA_NU=1e-3 NSDATA_T=50 FNO_TARGETS='fno_datagen fno_train'
echo "pipe: nsdata from $(rel) s"
NSDATA_DEADLINE=$((T_STOP - 120 - $(rel))) OUT=$L/nsd bash scripts/gpu.sh nsdata > $L/nsd.log 2>&1
echo "pipe: nsdata ended at $(rel) s: $(grep 'nsdata:' $L/nsd.log | tail -1)"
# the FNO-2D on two ranks, unless lease.sh's precheck saw them fail or run eagerly: then on one
for i in $(seq 1 60); do [ -f $L/fno2d_spec ] && break; sleep 5; done
spec2=$(cat $L/fno2d_spec 2> /dev/null || echo 'ns_v1e-3_fno2d*2')
echo "pipe: nstrain ns_v1e-3_fno3d*2 $spec2 from $(rel) s, SIGTERM at $T_STOP"
NSTRAIN_CONFIG="ns_v1e-3_fno3d*2 $spec2" NSTRAIN_CARRY=1 NSTRAIN_DEADLINE=$((T_STOP - $(rel))) \
  OUT=$L/nst bash scripts/gpu.sh nstrain > $L/nst.log 2>&1
echo "pipe: nstrain ended at $(rel) s"
touch $L/pipe.done
