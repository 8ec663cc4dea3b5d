#!/usr/bin/env bash
# One GPU-machine call for the fused block tail (issue 14): build, the GPU
# tests, compute-sanitizer memcheck on the fused tests, the kernels'
# micro-benchmark, and fno_bench `none` at 1024^2, batch 8, fused off and on.
# Raw outputs under $OUT/fused_block/ (and packed as $OUT/fused_block.tgz).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${FNO_BUILD_DIR:-/tmp/fno-gpu-build}
out=${OUT:-/tmp/fno-gpu-out}/fused_block
mkdir -p "$out"
py=$(command -v python3)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_BUILD_TESTS=ON \
  -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
  -DFNO_PYTHON="$py" --log-level=WARNING > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" --target fno_gpu_tests fno_bench fused_block_tail_bench > "$out/build.log" 2>&1 ||
  { grep -B2 -A10 'error' "$out/build.log" | head -60; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
pack() { [ -n "${OUT:-}" ] && tar -C "$OUT" -czf "$OUT/fused_block.tgz" fused_block; }
T="$build/tests/fno_gpu_tests"
B="$build/bench/fused_block_tail_bench"
# A smoke run of the raw kernels first, so that a hang shows where it is.
timeout 60 stdbuf -oL "$B" --batch 2 --grid 64 --reps 3 --no-unfused > "$out/micro_smoke.txt" 2>&1
echo "micro smoke exit $?"; cat "$out/micro_smoke.txt"
for tc in 'fused block tail: fp32*' 'fused block tail: bf16*' 'fused block tail: 64-bit*'; do
  timeout 120 stdbuf -oL "$T" -d -tc="$tc" >> "$out/gpu_tests_fused.log" 2>&1
  echo "[$tc] exit $? $(grep -E '^\[doctest\] (test cases|assertions)' "$out/gpu_tests_fused.log" | tail -2 | tr '\n' ' ')"
done
grep -B3 -A15 'ERROR' "$out/gpu_tests_fused.log" | head -60
grep -E 'z [0-9]|grad ' "$out/gpu_tests_fused.log" | sort | uniq | head -80 > "$out/low_precision_errors.txt"
pack
timeout 120 stdbuf -oL "$B" --batch 8 --channels 32 --grid 1024 --dtypes float,bf16,half \
  > "$out/micro_bench.txt" 2>&1; echo "micro-bench exit $?"; cat "$out/micro_bench.txt"
pack
for f in 0 1; do
  FNO_FUSED=$f timeout 100 "$build/apps/fno_bench" --resolutions 1024 --batches 8 --steps 5 --warmup 2 \
    --policies none --json "$out/bench1024_none_fused$f.json" > /dev/null 2> "$out/bench1024_none_fused$f.log"
  echo "FNO_FUSED=$f exit $?: $(grep '^fno_bench' "$out/bench1024_none_fused$f.log" | tail -2)"
done
pack
timeout 120 stdbuf -oL "$T" -tce='fused*' > "$out/gpu_tests_rest.log" 2>&1
echo "other GPU tests: exit $? $(grep -E '^\[doctest\] (test cases|assertions)' "$out/gpu_tests_rest.log" | tr '\n' ' ')"
grep -B3 -A15 'ERROR' "$out/gpu_tests_rest.log" | head -40
pack
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$T" \
  -tc='fused block tail: fp32*,fused block tail: bf16*' > "$out/memcheck_fused.log" 2>&1
echo "memcheck: exit $? ($(grep -E 'ERROR SUMMARY' "$out/memcheck_fused.log" | tail -1))"
pack
