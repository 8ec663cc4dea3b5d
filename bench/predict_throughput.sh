#!/usr/bin/env bash
# fno_predict's throughput and 3D rows of issue 49, in one call on one GPU:
#   2d  RES^2 (256), batch B (256), configs/darcy.yaml's model (n_modes 16 16, width 32,
#       4 blocks, projection ratio 2) with seed-0 random weights made by neuraloperator 2.0.0
#       (bench/neuralop_predict.py model), given to fno_predict as that state dict
#       (--model state.pt --model-config model.yaml: no normalizers, the same computation):
#       fno_predict fp32 and bf16 (--batch-size B, whole grid; its forward_seconds, one per
#       batch: the forward alone, input on the device, device synchronized) against
#       neuraloperator's model.eval() forward under torch.no_grad() in fp32 and under fp16
#       autocast (bench/neuralop_predict.py forward), on BATCHES timed batches after one
#       untimed; ROUNDS rounds, interleaved. fno_predict's fp32 output is compared with
#       neuraloperator's on the first batch (max relative L2). Each fno_predict row runs once
#       per mode of GRAPHS ("off on": --cuda-graphs off and on, CUDA graphs of the whole-grid
#       forward; auto captures only forwards of at most 20 ms, so a 256^2 batch of 256 stays
#       eager) in the same round. The ratios of the medians, per mode: ours fp32 /
#       neuraloperator fp32, ours bf16 / neuraloperator fp16 (the target: >= 3);
#   small  RES_S^2 (64), batch B_S (64), the same model and comparison over BATCHES_S (16) timed
#       batches: the launch-bound case CUDA graphs are for, fno_predict under each mode of GRAPHS;
#   3d  GRID3^3 (512), batch 1, poisson3d's model (n_modes 12 12 12, width 32, 4 blocks),
#       random weights, one input of standard normal numbers (HDF5, 512 MB at 512^3):
#       fno_predict under --gpu-memory-limit LIMIT3 (8GiB; streamed in tiles): wall time
#       (start to the renamed output), host and GPU peaks, plan; and neuraloperator's forward
#       of the same state dict (fp32, no_grad), expected to run out of memory.
# One JSON line per row into $OUT/predict_throughput.jsonl ("row": throughput, ratio, 3d,
# neuralop3d; fno_predict's rows and the ratios name their "grid" and "cuda_graphs"); logs in
# LOGS (default $OUT/predict_throughput/), packed as $OUT/predict_throughput.tgz after each step.
#
#   bench/predict_throughput.sh             # from the repository root
#
# Time on one H100 (build excluded): the 256^2 input (1280 samples, 336 MB) ~10 s, each
# fno_predict ~10 s (start, reading, 5 batches of 256, writing), each neuraloperator process
# ~10 s: ~3 min for ROUNDS=2 and two GRAPHS modes; small (17 MB input): ~2 min; 3d: the 512 MB
# input ~10 s, fno_predict under 8 GiB ~30 s (estimate), neuraloperator's attempt ~10 s. About
# 6 minutes in all.
#
# Environment: FNO_BUILD_DIR (default /tmp/fno-throughput-build; configured here when it has no
# build.ninja), FNO_PYTHON (python3), OUT (/tmp/fno-throughput-out), LOGS
# (OUT/predict_throughput; outside OUT leaves OUT with the .jsonl and the .tgz), SCRATCH (the inputs and
# outputs; /tmp/fno-throughput-scratch, removed at the end unless KEEP=1), STEPS ("2d small 3d"),
# RES (256), B (256), BATCHES (4), ROUNDS (2), GRAPHS ("off on"), RES_S (64), B_S (64),
# BATCHES_S (16), GRID3 (512), MODES3 ("12 12 12"),
# LIMIT3 (8GiB), DEVICE (default cuda; cpu with small RES, B, GRID3 and MODES3 tries the
# script anywhere: the 3d row then runs without LIMIT3, in tiles of a quarter of the rows).
# neuraloperator, tensorly and tensorly-torch come from the wheels in .whl/ when it exists.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${FNO_BUILD_DIR:-/tmp/fno-throughput-build}
out=${OUT:-/tmp/fno-throughput-out}
scratch=${SCRATCH:-/tmp/fno-throughput-scratch}
logs=${LOGS:-$out/predict_throughput}
rows=$out/predict_throughput.jsonl
steps=" ${STEPS:-2d small 3d} "
device=${DEVICE:-cuda}
res=${RES:-256} b=${B:-256} batches=${BATCHES:-4} rounds=${ROUNDS:-2}
res_s=${RES_S:-64} b_s=${B_S:-64} batches_s=${BATCHES_S:-16}
read -r -a graphs <<< "${GRAPHS:-off on}"
grid3=${GRID3:-512} limit3=${LIMIT3:-8GiB}
read -r -a modes3 <<< "${MODES3:-12 12 12}"
py=${FNO_PYTHON:-python3}
nop=bench/neuralop_predict.py
mkdir -p "$out" "$logs" "$scratch"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$scratch"' EXIT
t_call=$(date +%s)

command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
if [ -d .whl ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > /dev/null 2>&1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
"$py" -c 'import neuralop' || { echo "neuraloperator is not importable (no .whl/?)"; exit 1; }

# 0. The build.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_CUDA_KERNELS=ON \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING > "$logs/configure.log" 2>&1 ||
    { tail -30 "$logs/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build "$build" --target fno_predict > "$logs/build.log" 2>&1 ||
  { tail -40 "$logs/build.log"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
predict=$build/apps/fno_predict
t_work=$(date +%s)

# $OUT/predict_throughput.tgz: the logs folder as predict_throughput/, packed after each step
# (a device machine returns only a few files from $OUT).
pack() {
  tar -czf "$out/predict_throughput.tgz.part" -C "$logs" --transform 's|^\.|predict_throughput|' . &&
    mv "$out/predict_throughput.tgz.part" "$out/predict_throughput.tgz"
}

source "$root/bench/measure.sh"  # measure FILE COMMAND...

# One fno_predict row: NAME ROW MODEL_DIR INPUT [fno_predict arguments...]; the row's JSON
# (the median of the forward seconds after the first batch, samples/s) to the rows.
ours() {
  local name=$1 kind=$2 dir=$3 input=$4 wall rss rc
  shift 4
  local pred=$scratch/$name.h5 log=$logs/$name
  rm -f "$pred"
  measure "$log.m" "$predict" --model "$dir/state.pt" --model-config "$dir/model.yaml" \
    --input "$input" --out "$pred" --device "$device" "$@" 2> "$log.log" > "$log.out"
  read -r wall rss rc < "$log.m"
  "$py" - "$kind" "$name" "$wall" "$rss" "$rc" "$log" "$*" << 'PY' | tee -a "$rows"
import json, re, statistics, sys
kind, name, wall, rss, rc, log, args = sys.argv[1:]
text = open(log + ".log").read() + open(log + ".out").read()
find = lambda p: re.search(p, text, re.M)
plan, peak, fwd = find(r"^fno_predict: plan: (.*)$"), find(r"^gpu_peak_bytes (\d+)"), \
    find(r"^forward_seconds (.*)$")
row = {"row": kind, "impl": "fno_predict", "name": name, "args": args, "exit": int(rc),
       "wall_s": float(wall), "host_peak_bytes": int(rss),
       "gpu_peak_bytes": int(peak.group(1)) if peak else 0, "plan": plan.group(1) if plan else ""}
m = re.search(r"--precision (\w+)", args)
row["precision"] = m.group(1) if m else ""
m = re.search(r"--cuda-graphs (\w+)", args)
row["cuda_graphs"] = m.group(1) if m else "auto"
m = re.search(r" at (\d+)x", row["plan"])
row["grid"] = int(m.group(1)) if m else 0
if fwd:
    t = [float(v) for v in fwd.group(1).split()]
    timed = t[1:] or t
    m = re.search(r"--batch-size (\d+)", args)
    batch = int(m.group(1)) if m else 0
    row.update({"batch": batch, "forward_s": t, "ms_per_batch": round(statistics.median(timed) * 1e3, 3),
                "samples_per_s": round(batch / statistics.median(timed), 2) if batch else None})
if int(rc) != 0:
    row["error"] = text.strip().splitlines()[-1][:300] if text.strip() else ""
print(json.dumps(row))
PY
  [ "$rc" = 0 ] || tail -2 "$log.log"
}

# neuraloperator's forward: LABEL ROW MODEL_DIR [neuralop_predict.py forward arguments...]
theirs() {
  local label=$1 kind=$2 dir=$3
  shift 3
  "$py" "$nop" forward --model-dir "$dir" --device "$device" --label "$label" "$@" \
    2>> "$logs/neuralop.log" |
    "$py" -c 'import json, sys
for l in sys.stdin:
    print(json.dumps({"row": sys.argv[1], **json.loads(l)}), flush=True)' "$kind" | tee -a "$rows"
}

# RES^2, batch B, BATCHES timed batches, the rows' NAME prefix: ours fp32 and bf16 under each
# mode of GRAPHS against neuraloperator fp32 and fp16 autocast; the ratios per grid and mode.
two_d() {
  local res=$1 b=$2 batches=$3 tag=$4 m2=$scratch/model2d x2=$scratch/x$1.h5 r g cmp
  [ -f "$m2/state.pt" ] || "$py" "$nop" model --dim 2 --n-modes 16 16 --hidden-channels 32 \
    --n-layers 4 --projection-channel-ratio 2 --out "$m2" > "$logs/model2d.log" 2>&1 ||
    { tail -3 "$logs/model2d.log"; exit 1; }
  [ -f "$x2" ] || "$py" "$nop" input --resolution "$res" --samples $((b * (batches + 1))) \
    --out "$x2" > "$logs/input2d_$res.log" 2>&1 || { tail -3 "$logs/input2d_$res.log"; exit 1; }
  for r in $(seq 1 "$rounds"); do
    for g in "${graphs[@]}"; do
      ours "${tag}_fp32_${g}_$r" throughput "$m2" "$x2" --batch-size "$b" --precision fp32 \
        --cuda-graphs "$g"
    done
    cmp=()
    [ "$r" = 1 ] && cmp=(--compare "$scratch/${tag}_fp32_${graphs[0]}_1.h5" --input "$x2")
    theirs "round$r" throughput "$m2" --resolutions "$res" --batch "$b" --batches "$batches" \
      --precision fp32 "${cmp[@]}"
    for g in "${graphs[@]}"; do
      ours "${tag}_bf16_${g}_$r" throughput "$m2" "$x2" --batch-size "$b" --precision bf16 \
        --cuda-graphs "$g"
    done
    theirs "round$r" throughput "$m2" --resolutions "$res" --batch "$b" --batches "$batches" \
      --precision fp16
    rm -f "$scratch/${tag}"_*_"$r".h5
  done
  "$py" - "$rows" "$res" "${graphs[@]}" << 'PY' | tee -a "$rows"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
grid, modes = int(sys.argv[2]), sys.argv[3:]
def rate(impl, prec, mode=None):
    v = [r["samples_per_s"] for r in rows if r.get("row") == "throughput" and
         r.get("impl", "").startswith(impl) and r.get("precision") == prec and
         r.get("grid") == grid and (mode is None or r.get("cuda_graphs") == mode) and
         r.get("samples_per_s")]
    return statistics.median(v) if v else None
for mode in modes:
    for ours, theirs in (("fp32", "fp32"), ("bf16", "fp16")):
        a, b = rate("fno_predict", ours, mode), rate("neuraloperator", theirs)
        print(json.dumps({"row": "ratio", "grid": grid, "cuda_graphs": mode, "ours": ours,
                          "neuraloperator": theirs, "ours_samples_per_s": a,
                          "neuraloperator_samples_per_s": b,
                          "ratio": round(a / b, 3) if a and b else None, "target": 3.0}))
PY
  pack
}

# 1. RES^2, batch B; then the small grid, RES_S^2, batch B_S.
[[ "$steps" == *" 2d "* ]] && two_d "$res" "$b" "$batches" ours
[[ "$steps" == *" small "* ]] && two_d "$res_s" "$b_s" "$batches_s" small

# 2. GRID3^3, batch 1, under LIMIT3.
if [[ "$steps" == *" 3d "* ]]; then
  m3=$scratch/model3d x3=$scratch/x3d_$grid3.h5
  "$py" "$nop" model --dim 3 --n-modes "${modes3[@]}" --hidden-channels 32 --n-layers 4 \
    --projection-channel-ratio 2 --out "$m3" > "$logs/model3d.log" 2>&1 ||
    { tail -3 "$logs/model3d.log"; exit 1; }
  t0=$(date +%s)
  [ -f "$x3" ] || "$py" "$nop" input --resolution "$grid3" --dim 3 --samples 1 --out "$x3" \
    > "$logs/input3d.log" 2>&1 || { tail -3 "$logs/input3d.log"; exit 1; }
  echo "3d input: $(stat -c %s "$x3") bytes in $(($(date +%s) - t0)) s"
  if [ "$device" = cpu ]; then
    ours "ours3d_$grid3" 3d "$m3" "$x3" --precision fp32 --tile-rows $((grid3 / 4))
  else
    ours "ours3d_$grid3" 3d "$m3" "$x3" --precision fp32 --gpu-memory-limit "$limit3"
  fi
  rm -f "$scratch/ours3d_$grid3.h5"
  theirs "3d" neuralop3d "$m3" --resolutions "$grid3" --batch 1 --batches 1 --precision fp32
fi
pack
echo "rows: $rows, $out/predict_throughput.tgz; $(($(date +%s) - t_work)) s after the build, $(($(date +%s) - t_call)) s in all"
