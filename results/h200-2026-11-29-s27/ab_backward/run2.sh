#!/usr/bin/env bash
# The whole GPU suite on the change, then the fused tests' messages against HEAD's kernels.
set -u
export FNO_PYTHON=python3 NCCL_NVLS_ENABLE=0
B=/tmp/fno-gpu-build
FNO_TARGETS="fno_gpu_tests fno_train" OUT=$OUT bash scripts/gpu.sh tests > $OUT/suite.txt 2>&1
tail -8 $OUT/suite.txt
cp $B/tests/fno_gpu_tests /tmp/t_new
cp verify_base/block_tail_backward*.cu libfno/src/cuda/
t=$(date +%s)
cmake --build $B --target fno_gpu_tests > $OUT/build_base.txt 2>&1 || { tail -40 $OUT/build_base.txt; exit 1; }
echo "build base: $(($(date +%s) - t)) s"
cp $B/tests/fno_gpu_tests /tmp/t_base
for v in new base; do
  /tmp/t_$v -sf='*test_gpu_fused*' > $OUT/fused_$v.log 2>&1
  echo "$v fused tests: exit $?: $(grep -E '^\[doctest\] (test cases|assertions)' $OUT/fused_$v.log | tr -s ' ' | tr '\n' ' ')"
  grep -A1 'MESSAGE' $OUT/fused_$v.log | grep -v 'MESSAGE\|^--' | sed 's/^ *//' > $OUT/messages_$v.txt
done
echo "messages: $(wc -l < $OUT/messages_new.txt) lines; differing: $(diff $OUT/messages_new.txt $OUT/messages_base.txt | grep -c '^<')"
diff $OUT/messages_new.txt $OUT/messages_base.txt | head -10
grep -c 'not bit-identical' $OUT/fused_new.log $OUT/fused_base.log
grep -m3 'logged: shape' $OUT/messages_new.txt
mkdir -p $OUT/keep && cp $OUT/fused_*.log $OUT/messages_*.txt $OUT/suite.txt $OUT/results/gpu_tests.log $OUT/keep/ 2>/dev/null
tar czf $OUT/logs.tgz -C $OUT keep && rm -rf $OUT/keep $OUT/fused_*.log $OUT/messages_*.txt
