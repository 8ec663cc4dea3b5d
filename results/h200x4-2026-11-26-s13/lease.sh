#!/bin/bash
# This session's x4 lease, call 1: the nu = 1e-4 set and four FNO-2D variants (main), and beside
# them the GPU suite and ddp-graphs2's checks (main + .carry/ddp.patch, built in /tmp/ddp).
set -u
R=$PWD
D=${CALL_END:-585}
export NSDATA_NU=1e-4 NSDATA_T=30
base=ns_v1e-4_fno2d
v1="%model.use_channel_mlp=false%model.single_gelu=true"
v2="$v1%model.spectral_init=paper"
export NSTRAIN_CONFIG="$base$v1 $base@1$v1 $base$v2 $base@1$v2"
mkdir -p "$OUT/m" "$OUT/ns" "$OUT/b" "$OUT/d" "$OUT/t"
FNO_TARGETS='fno_datagen fno_train' OUT=$OUT/m bash scripts/gpu.sh > "$OUT/m.log" 2>&1 ||
  { tail -30 "$OUT/m.log"; exit 1; }
echo "main built at $SECONDS s"
NSDATA_DEADLINE=$((D - 15 - SECONDS)) NSTRAIN_DEADLINE=$((D - 20 - SECONDS)) \
  FNO_TARGETS='fno_datagen fno_train' OUT=$OUT/ns bash scripts/gpu.sh nsdata nstrain > "$OUT/ns.log" 2>&1 &
mkdir -p /tmp/ddp && cp -a "$R/." /tmp/ddp/ && (cd /tmp/ddp && { command -v patch > /dev/null && patch -p1 -s < .carry/ddp.patch || git apply .carry/ddp.patch; }) ||
  { echo "ddp.patch failed"; wait; exit 1; }
(cd /tmp/ddp && FNO_BUILD_DIR=/tmp/ddp-build FNO_TARGETS='fno_train fno_bench fno_gpu_tests' \
  OUT=$OUT/b bash scripts/gpu.sh > "$OUT/b.log" 2>&1) || tail -30 "$OUT/b.log"
echo "ddp tree built at $SECONDS s ($(grep 'build:' "$OUT/b.log"))"
(cd /tmp/ddp && CUDA_VISIBLE_DEVICES=1,2 FNO_BUILD_DIR=/tmp/ddp-build FNO_TARGETS=fno_train OUT=$OUT/d \
  timeout $((D - 10 - SECONDS)) bash scripts/gpu.sh ddpgraphs > "$OUT/d.log" 2>&1; echo "ddpgraphs done at $SECONDS s") &
sleep 5
(cd /tmp/ddp && CUDA_VISIBLE_DEVICES=3 FNO_BUILD_DIR=/tmp/ddp-build FNO_TARGETS=fno_gpu_tests OUT=$OUT/t \
  timeout $((D - 10 - SECONDS)) bash scripts/gpu.sh tests > "$OUT/t.log" 2>&1; echo "tests done at $SECONDS s") &
wait
for f in ns d t; do echo "== $f"; sed -n '/===== summary/,$p' "$OUT/$f.log" | cut -c1-400; done
rm -rf "$OUT"/*/results "$OUT"/*/summary.txt "$OUT/m" "$OUT/b" "$OUT/m.log" "$OUT/b.log"
