set -u
FNO_TARGETS="fno_gpu_tests fno_train" timeout 420 bash scripts/gpu.sh tests > $OUT/suite.txt 2>&1; tail -4 $OUT/suite.txt
b=/tmp/fno-gpu-build/apps/fno_train
for g in on off; do
  $b --config configs/darcy.yaml --set training.max_grad_norm=1e30 --set training.cuda_graphs=$g \
     --set output.dir=/tmp/clip_$g > $OUT/clip_$g.log 2>&1; echo "graphs $g exit $?"
  grep -o '"grad_norm": [^,]*, "grad_norm_max": [^,]*' /tmp/clip_$g/*/metrics.jsonl /tmp/clip_$g/metrics.jsonl 2>/dev/null | sed -n '1p;20p' 
done
cp /tmp/fno-gpu-build/../clip_on/metrics.jsonl $OUT/ 2>/dev/null
a=$(ls -d /tmp/clip_on/* /tmp/clip_on 2>/dev/null | xargs -I{} sh -c 'test -f {}/metrics.jsonl && echo {}' | head -1)
c=$(ls -d /tmp/clip_off/* /tmp/clip_off 2>/dev/null | xargs -I{} sh -c 'test -f {}/metrics.jsonl && echo {}' | head -1)
cp $a/metrics.jsonl $OUT/metrics_on.jsonl; cp $c/metrics.jsonl $OUT/metrics_off.jsonl
python3 - "$a/metrics.jsonl" "$c/metrics.jsonl" <<'P'
import json,sys
A=[json.loads(l) for l in open(sys.argv[1])]; B=[json.loads(l) for l in open(sys.argv[2])]
print("epochs", len(A), len(B))
for k in ("grad_norm","grad_norm_max","train_l2","16_l2","32_l2"):
    if k in A[0]: print(k, "worst rel diff on/off:", max(abs(a[k]-b[k])/max(abs(b[k]),1e-30) for a,b in zip(A,B)), "epoch20:", A[-1][k], B[-1][k])
P
