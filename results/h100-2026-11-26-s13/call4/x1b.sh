#!/bin/bash
# x1: the offload test's fix after the graphs tests; the ddp branch's capture probes; a profile
# of the Navier-Stokes step's kernels (ncu)
set -u
R=$PWD
mkdir -p "$OUT/m" "$OUT/b"
mkdir -p /tmp/ddp && cp -a "$R/." /tmp/ddp/ && (cd /tmp/ddp && patch -p1 -s < .carry/ddp.patch) || echo "patch failed"
(FNO_TARGETS='fno_gpu_tests fno_datagen' OUT=$OUT/m bash scripts/gpu.sh > "$OUT/m.log" 2>&1; echo "main built at $SECONDS s"; tail -3 "$OUT/m.log") &
(cd /tmp/ddp && FNO_BUILD_DIR=/tmp/ddp-build FNO_TARGETS=fno_gpu_tests OUT=$OUT/b bash scripts/gpu.sh > "$OUT/b.log" 2>&1; echo "ddp built at $SECONDS s"; tail -3 "$OUT/b.log") &
wait
g=/tmp/fno-gpu-build/tests/fno_gpu_tests
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 $g -sf='*test_gpu_graphs.cpp,*test_gpu_offload.cpp' > "$OUT/main_graphs_offload.log" 2>&1; echo "main, graphs + offload files: exit $?"
grep -E '^\[doctest\] (test cases|assertions)' "$OUT/main_graphs_offload.log"
grep -h "MESSAGE: \(none\|slim\|all\|recompute+offload\): peak" "$OUT/main_graphs_offload.log"
grep -B2 -A6 'ERROR' "$OUT/main_graphs_offload.log" | head -30
t=/tmp/ddp-build/tests/fno_gpu_tests
for v in "" TORCH_NCCL_AVOID_RECORD_STREAMS=1 TORCH_NCCL_BLOCKING_WAIT=0 NCCL_GRAPH_MIXING_SUPPORT=0; do
  echo "== ddp probe ${v:-default}"
  env $v FNO_GRAPH_PROBE=1 timeout 90 $t -tc='GPU graphs: a step over a gradient sync*' > "$OUT/probe.log" 2>&1; echo "exit $?"
  grep -h "fno probe\|capture failed\|test cases" "$OUT/probe.log" | sed 's/stream 0x[0-9a-f]*/stream S/' | uniq -c | head -30
  [ -z "$v" ] && cp "$OUT/probe.log" "$OUT/probe_default.log"
done
rm -f "$OUT/probe.log"
echo "== ncu of the fused step (256^2, float32, batch 64, no graphs)"
timeout 200 ncu --clock-control none --launch-skip 400 --launch-count 40 --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  /tmp/fno-gpu-build/apps/fno_datagen --problem ns --viscosity 1e-3 --resolution 256 --subsample 4 \
  --dt 1e-4 --t-final 1 --samples 64 --seed 0 --precision float32 --batch 64 --device cuda \
  --no-cuda-graph --progress none --out /tmp/ns_prof.h5 > "$OUT/ncu_ns.csv" 2> "$OUT/ncu_ns.err"; echo "ncu exit $?"
tail -3 "$OUT/ncu_ns.err"
python3 - "$OUT/ncu_ns.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; rows = rows[1:]
ik, im, iu, iv = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Unit"), h.index("Metric Value")
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    agg[r[ik][:70]][r[im] + " [" + r[iu] + "]"].append(float(r[iv].replace(",", "")))
for k, m in agg.items():
    print(k, {mm: round(sum(v) / len(v), 2) for mm, v in m.items()}, "n", len(next(iter(m.values()))))
PY
rm -rf "$OUT/m" "$OUT/b"
