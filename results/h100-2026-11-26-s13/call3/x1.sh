#!/bin/bash
# x1: where the offload test's extra ~250 MiB comes from (main alone, main's whole suite, the
# ddp tree after its new test)
set -u
R=$PWD
mkdir -p "$OUT/m" "$OUT/b"
mkdir -p /tmp/ddp && cp -a "$R/." /tmp/ddp/ && (cd /tmp/ddp && patch -p1 -s < .carry/ddp.patch) || echo "patch failed"
(FNO_TARGETS=fno_gpu_tests OUT=$OUT/m bash scripts/gpu.sh > "$OUT/m.log" 2>&1; echo "main built at $SECONDS s") &
(cd /tmp/ddp && FNO_BUILD_DIR=/tmp/ddp-build FNO_TARGETS=fno_gpu_tests OUT=$OUT/b bash scripts/gpu.sh > "$OUT/b.log" 2>&1; echo "ddp built at $SECONDS s") &
wait
g=/tmp/fno-gpu-build/tests/fno_gpu_tests
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 $g -tc='GPU: offloading lowers*' > "$OUT/main_offload_alone.log" 2>&1; echo "main, offload test alone: exit $?"
grep -h "MESSAGE: \(none\|slim\|all\|recompute+offload\): peak" "$OUT/main_offload_alone.log"
timeout 90 /tmp/ddp-build/tests/fno_gpu_tests -tc='GPU graphs: a step over a gradient sync*,GPU: offloading lowers*' > "$OUT/ddp_offload.log" 2>&1; echo "ddp, its sync test then the offload test: exit $?"
grep -h "MESSAGE: \(none\|slim\|all\|recompute+offload\): peak" "$OUT/ddp_offload.log"
timeout 300 $g > "$OUT/main_suite.log" 2>&1; echo "main, whole suite: exit $? at $SECONDS s"
grep -E '^\[doctest\] (test cases|assertions)' "$OUT/main_suite.log"
grep -h "MESSAGE: \(none\|slim\|all\|recompute+offload\): peak" "$OUT/main_suite.log"
grep -B2 -A6 'ERROR' "$OUT/main_suite.log" | head -40
rm -rf "$OUT/m" "$OUT/b"
gzip -f "$OUT/main_suite.log"
