#!/usr/bin/env bash
# s20: 1 GPU: build fno_train, bench/data_stall.sh (issue 53's data-stall row)
set -uo pipefail
export OUT=${OUT:-/tmp/out}
T0=$(date +%s)
b=/tmp/fno-all
py=$(command -v python3)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ ! -f "$b/build.ninja" ]; then
  cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_BUILD_TESTS=ON -DFNO_CUDA_KERNELS=ON \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING > /tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; exit 1; }
fi
ninja -C "$b" -j16 fno_train > /tmp/build.log 2>&1 || { grep -E "error|FAILED" /tmp/build.log | head -40; exit 1; }
echo "build: $(($(date +%s) - T0)) s"
timeout $((${CALL_T:-280} - $(date +%s) + T0)) bash bench/data_stall.sh $b /tmp/stall > /tmp/stall.log 2>&1
echo "stall rc=$? t=$(($(date +%s) - T0))"; tail -15 /tmp/stall.log | cut -c1-300
cp /tmp/stall.log /tmp/stall/ 2>/dev/null
tar czf $OUT/stall.tgz --exclude='*.pt' --exclude='runs' -C /tmp stall
cat /tmp/stall/data_stall.json 2>/dev/null | head -c 3000
