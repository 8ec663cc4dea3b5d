#!/usr/bin/env bash
# A/B of walk_tiles (tiles.cuh) against HEAD's kernels in verify_base/: the fused tests'
# messages must be the same, and the kernels' times.
set -u
export FNO_PYTHON=python3 NCCL_NVLS_ENABLE=0
B=/tmp/fno-gpu-build
t=$(date +%s)
FNO_TARGETS="fno_gpu_tests fused_block_tail_bench" OUT=$OUT bash scripts/gpu.sh > $OUT/build_new.txt 2>&1 ||
  { tail -40 $OUT/build_new.txt; exit 1; }
echo "build new: $(($(date +%s) - t)) s"
cp $B/tests/fno_gpu_tests /tmp/t_new && cp $B/bench/fused_block_tail_bench /tmp/b_new
cp verify_base/*.cu verify_base/tiles.cuh libfno/src/cuda/
t=$(date +%s)
cmake --build $B --target fno_gpu_tests fused_block_tail_bench > $OUT/build_base.txt 2>&1 ||
  { tail -40 $OUT/build_base.txt; exit 1; }
echo "build base: $(($(date +%s) - t)) s"
cp $B/tests/fno_gpu_tests /tmp/t_base && cp $B/bench/fused_block_tail_bench /tmp/b_base
for v in new base; do
  /tmp/t_$v -sf='*test_gpu_fused*' > $OUT/fused_$v.log 2>&1
  echo "$v fused tests: exit $?: $(grep -E '^\[doctest\] (test cases|assertions)' $OUT/fused_$v.log | tr -s ' ' | tr '\n' ' ')"
  grep -A1 'MESSAGE' $OUT/fused_$v.log | grep -v 'MESSAGE\|^--' | sed 's/^ *//' > $OUT/messages_$v.txt
done
echo "messages: $(wc -l < $OUT/messages_new.txt) lines; differing: $(diff $OUT/messages_new.txt $OUT/messages_base.txt | grep -c '^<')"
for i in 1 2; do
  for v in new base; do
    /tmp/b_$v --batch 8 --channels 32 --grid 1024 --dtypes float,3xtf32,tf32,bf16,half > $OUT/bench_${v}_$i.txt 2>&1
  done
done
for v in new base; do
  echo "== $v (ms, runs 1 2)"
  paste $OUT/bench_${v}_1.txt $OUT/bench_${v}_2.txt | awk -F'\t' '$1 ~ /fused/ {split($1,a," "); split($2,b," "); print a[1], a[3], a[4], b[4]}'
done
rm -f $OUT/fused_*.log $OUT/messages_base.txt && gzip -9 $OUT/messages_new.txt
