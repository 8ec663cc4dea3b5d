#!/usr/bin/env bash
# s20 2-GPU call: build all (CUDA kernels), GPU tests on GPU 1 beside the strong8k one-GPU
# baseline on GPU 0, then strong8k on 2 GPUs (measured search), the NCCL domain test, graphs rows.
set -uo pipefail
export OUT=${OUT:-/tmp/out} NCCL_NVLS_ENABLE=0
T0=$(date +%s)
b=/tmp/fno-all
r=/tmp/r20; mkdir -p $r
nvidia-smi -L
py=$(command -v python3)
if [ ! -f "$b/build.ninja" ]; then
  cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_BUILD_TESTS=ON -DFNO_CUDA_KERNELS=ON \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING > $r/configure.log 2>&1 || { tail -30 $r/configure.log; exit 1; }
fi
ninja -C "$b" -j32 fno_train fno_bench fno_predict fno_datagen fno_gpu_tests > $r/build.log 2>&1 || { grep -E "error|FAILED" $r/build.log | head -40; exit 1; }
echo "build: $(($(date +%s) - T0)) s"
bench=$b/apps/fno_bench
mkdir -p $r/domain $r/plans
( CUDA_VISIBLE_DEVICES=1 timeout 230 $b/tests/fno_gpu_tests > $r/gpu_tests.log 2>&1; echo "gpu tests rc=$?" >> $r/gpu_tests.log ) &
gt=$!
CUDA_VISIBLE_DEVICES=0 timeout 200 $bench --warmup 1 --steps 3 --plan-cache $r/plans --json $r/domain/strong8k_1.json \
  --resolutions 8192 --batches 1 --precision fp32 --policies auto > /dev/null 2> $r/domain/strong8k_1.log
echo "strong8k_1 rc=$? t=$(($(date +%s) - T0))"; grep "^fno_bench" $r/domain/strong8k_1.log | cut -c1-200
wait $gt; echo "t=$(($(date +%s) - T0))"; tail -1 $r/gpu_tests.log
grep -E "^\[doctest\] (test cases|assertions)" $r/gpu_tests.log
grep -B3 -A12 "ERROR\|FAILED" $r/gpu_tests.log | head -60
timeout 150 $py -m torch.distributed.run --standalone --nproc-per-node 2 --no-python $bench --warmup 1 --steps 3 \
  --json $r/domain/strong8k_2.json --resolutions 8192 --batches 1 --precision fp32 --domain-parallel 2 \
  --one-gpu-baseline 0 > /dev/null 2> $r/domain/strong8k_2.log
echo "strong8k_2 rc=$? t=$(($(date +%s) - T0))"; grep "^fno_bench" $r/domain/strong8k_2.log | cut -c1-400
$py - $r/domain << 'PY'
import json, sys, os
d = sys.argv[1]
a = json.load(open(os.path.join(d, "strong8k_1.json")))["rows"][0]
b = json.load(open(os.path.join(d, "strong8k_2.json")))["rows"][0]
print("strong8k: 1 GPU %.1f ms, 2 GPUs %.1f ms (%s), speed-up %.3fx; plan %s; search %.1f s" % (
    a["ms_per_step"], b["ms_per_step"], b["rank_ms"], a["ms_per_step"] / b["ms_per_step"], b["plan"], b.get("plan_seconds", 0)))
PY
FNO_PYTHON=$py timeout 200 bash tests/cli/test_domain_nccl.sh $b "$PWD" /tmp/fno_domain_nccl $py > $r/domain_nccl.log 2>&1
echo "nccl test rc=$? t=$(($(date +%s) - T0))"; tail -12 $r/domain_nccl.log
FNO_BUILD_DIR=$b FNO_TARGETS="fno_predict fno_datagen" OUT=$r/se timeout 90 bash scripts/gpu.sh streamerrors > $r/streamerrors.log 2>&1
echo "streamerrors rc=$? t=$(($(date +%s) - T0))"; grep streamerrors $r/streamerrors.log | cut -c1-300 | tail -6
left=$((565 - $(date +%s) + T0))
if [ $left -gt 60 ]; then
  FNO_BUILD_DIR=$b STEPS="small" GRAPHS="off on" ROUNDS=1 OUT=$r/tp timeout $left bash bench/predict_throughput.sh > $r/throughput.log 2>&1
  echo "throughput rc=$? t=$(($(date +%s) - T0))"; tail -8 $r/throughput.log
fi
tar czf $OUT/r20.tgz -C /tmp r20
echo "t=$(($(date +%s) - T0))"
