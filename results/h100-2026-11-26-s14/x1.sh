#!/bin/bash
# Fourteenth session, x1: the clipping's GPU tests, the offload window test alone, and the
# gradient norms of the nu = 1e-3 FNO-2D (its config, batch 20, 40-step rollout) on a small set.
set -u
B=/tmp/fno-gpu-build L=$OUT/x1
mkdir -p $L
FNO_TARGETS='fno_gpu_tests fno_datagen fno_train' OUT=$L/b bash scripts/gpu.sh > $L/build.txt 2>&1 ||
  { tail -20 $L/build.txt; exit 1; }
echo "built at $SECONDS s"
timeout 150 $B/tests/fno_gpu_tests -tc='GPU graphs*' > $L/graphs.log 2>&1
echo "GPU graphs tests: exit $? $(grep -E '^\[doctest\] (test cases|assertions)' $L/graphs.log | tr '\n' ' ')"
grep -h 'MESSAGE: clipped\|ERROR' -A3 $L/graphs.log | cut -c1-300 | head -20
timeout 60 $B/tests/fno_gpu_tests -tc='GPU: the in-flight window learns*' > $L/window.log 2>&1
echo "window test alone: exit $? $(grep -E '^\[doctest\] (test cases)' $L/window.log)"
grep -h 'MESSAGE' $L/window.log | cut -c1-200 | head -4
timeout 60 $B/apps/fno_datagen --problem ns --viscosity 1e-3 --t-final 50 --dt 1e-3 --resolution 64 \
  --subsample 1 --samples 220 --test-samples 20 --seed 0 --device cuda --progress none \
  --out $L/ns.h5 > $L/datagen.log 2>&1 || { echo "datagen failed"; tail -3 $L/datagen.log; }
timeout 100 $B/apps/fno_train --config configs/ns_v1e-3_fno2d.yaml --out $L/probe \
  --set data.train_file=$L/ns_train.h5 \
  --set "data.test=[{file: $L/ns_test.h5, name: ns, n_samples: 20, batch_size: 10}]" \
  --set data.n_train=200 --set training.epochs=30 --set training.eval_every=10 \
  --set training.max_grad_norm=1e30 --set output.progress=none > $L/probe.log 2>&1
echo "probe: exit $? at $SECONDS s"
python3 -c "
import json
for l in open('$L/probe/metrics.jsonl'):
    r=json.loads(l); print(r['epoch'], round(r['train_loss'],4), round(r['grad_norm'],3), round(r['grad_norm_max'],3), r.get('ns_l2',''))
"
rm -rf $L/b $L/*.h5 $L/probe/*.pt $L/probe/predictions.h5
