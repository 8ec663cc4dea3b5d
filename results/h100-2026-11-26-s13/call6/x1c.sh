#!/bin/bash
# x1: ddp-graphs2 after the null-sync fix: the one-rank GPU test, the graphs tests, a one-process
# seed run with graphs on
set -u
R=$PWD
mkdir -p /tmp/ddp && cp -a "$R/." /tmp/ddp/ && cd /tmp/ddp && patch -p1 -s < .carry/ddp.patch || { echo "patch failed"; exit 1; }
FNO_TARGETS='fno_train fno_gpu_tests' OUT=$OUT/b bash scripts/gpu.sh > "$OUT/b.log" 2>&1 || { tail -20 "$OUT/b.log"; exit 1; }
echo "built at $SECONDS s"; rm -rf "$OUT/b"
t=/tmp/fno-gpu-build/tests/fno_gpu_tests
timeout 120 $t -sf='*test_gpu_graphs.cpp' > "$OUT/graphs_tests.log" 2>&1; echo "graphs tests: exit $?"
grep -E '^\[doctest\] (test cases|assertions)|capture failed|over a one-rank' "$OUT/graphs_tests.log" | cut -c1-250
grep -B2 -A8 'ERROR\|CRASH' "$OUT/graphs_tests.log" | head -30
timeout 120 /tmp/fno-gpu-build/apps/fno_train --config configs/darcy.yaml --out /tmp/seed1 --set training.cuda_graphs=on --set output.progress=none > "$OUT/seed.log" 2>&1; echo "one-process seed run: exit $?"
grep -o '"metrics": {[^}]*}' /tmp/seed1/summary.json
