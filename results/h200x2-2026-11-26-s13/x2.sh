#!/bin/bash
# x2: ddp-graphs2 (with GradientSync::set_hooks) on two GPUs: gpu.sh ddpgraphs
set -u
R=$PWD
mkdir -p /tmp/ddp && cp -a "$R/." /tmp/ddp/ && cd /tmp/ddp && patch -p1 -s < .carry/ddp.patch || { echo "patch failed"; exit 1; }
FNO_TARGETS='fno_train fno_bench fno_gpu_tests' timeout 540 bash scripts/gpu.sh ddpgraphs > "$OUT/ddp.log" 2>&1
sed -n '/===== summary/,$p' "$OUT/ddp.log" | cut -c1-400
grep -h "capture failed" "$OUT"/results/ddpgraphs/*.log | sort | uniq -c | head
