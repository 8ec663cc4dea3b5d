set -u
export FNO_PYTHON=python3 NCCL_NVLS_ENABLE=0
FNO_TARGETS="fno_gpu_tests fno_train" OUT=$OUT bash scripts/gpu.sh tests > $OUT/suite.txt 2>&1
tail -6 $OUT/suite.txt
B=/tmp/fno-gpu-build
FNO_DFT_FIRST_DIM=0 FNO_DFT_MIDDLE_DIM=0 timeout 150 $B/tests/fno_gpu_tests -sf='*test_gpu_tiled*,*test_gpu_parity*,*test_gpu_offload*' > $OUT/dft_off.log 2>&1
echo "DFT GEMMs off: exit $? $(grep -E '^\[doctest\] (test cases|assertions)' $OUT/dft_off.log | tr -s ' ' | tr '\n' ' ')"
grep -B2 -A10 'ERROR\|FAILED' $OUT/dft_off.log | head -30
