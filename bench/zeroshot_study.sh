#!/usr/bin/env bash
# Zero-shot super-resolution with fno_predict (issue 49, deliverable 4), in one call on one GPU:
#   train  fno_datagen Darcy data at TRAIN_GRID^2 (N_TRAIN + 32 samples) and a fno_train run of
#          configs/darcy.yaml's model on it (EPOCHS epochs, cosine over them), or MODEL_RUN=DIR;
#   data   a few Darcy test samples, solved, at each of GRIDS (fno_datagen, seed 7);
#   predict fno_predict of the model on each grid's samples, fp32, batch 1: the whole grid
#          (no limit) with the truth (--y-key sol), and, on a GPU, under --gpu-memory-limit
#          LIMIT without it (streamed in tiles where the whole grid does not fit; its output
#          against the whole grid's: max relative L2); the training grid's own test set
#          first. Per sample: relative L2 and H1; per row:
#          the process's wall time (start to the renamed output), the host's peak (max RSS),
#          the GPU's peak (fno_predict's gpu_peak_bytes), each batch's forward seconds, the
#          plan line. A snapshot of the first sample per grid (input, truth, prediction, error:
#          the whole field strided to at most SNAP^2 and a SNAP^2 crop at full resolution from
#          its centre, float16) into LOGS/snap_<grid>.npz (about 1 MB each);
#   neuralop  neuraloperator 2.0.0's model.eval() forward under torch.no_grad() of the same
#          weights (the run's model.pt), batch 1, fp32, at each grid: time and peak memory, or
#          its out-of-memory error (bench/neuralop_predict.py; wheels from .whl/ when there).
# One JSON line per row into $OUT/zeroshot.jsonl (appended; "row": train, zeroshot,
# neuralop); the logs, the snapshots and the run's config.yaml/metrics.jsonl/summary.json in
# LOGS (default $OUT/zeroshot/), packed as $OUT/zeroshot.tgz (zeroshot/...) after each step.
# notebooks/zeroshot_figure.py draws notebooks/figures/zero_shot.png from them.
#
#   bench/zeroshot_study.sh                  # from the repository root
#
# Time on one H100 (build excluded), from earlier calls' logs: fno_datagen's Darcy solve on CUDA
# took about 5 ms a sample at 256^2 (in batches of 32), 45 ms at 512^2, 150 ms at 1024^2,
# 0.67 s at 2048^2 (results/h100-2026-11-22/resolution_study/data/*/datagen.log), so about
# 3 s at 4096^2 and 13 s at 8192^2 (x4.4 per doubling), plus ~3 s to start each process;
# fno_train of this model at 256^2 took 1.48 s an epoch of 1000 samples
# (results/h100-2026-11-22/predictions256). Defaults: train ~20 s data + ~25 s (1000 samples,
# 30 epochs: 17.8 s and 21.9 s measured on an H100, 2026-11-28), data ~35 s, predict ~60 s, neuralop ~20 s: about 5 min; WITH_8192=1 adds
# ~45 s (2 samples of 13 s, two predictions of ~6 s, neuraloperator out of memory).
# To split it over two calls: KEEP=1 STEPS=train, then KEEP=1 STEPS="data predict neuralop"
# (the model and the data in SCRATCH are taken again; the machine must stay the same).
#
# Environment: FNO_BUILD_DIR (default /tmp/fno-zeroshot-build; configured here when it has no
# build.ninja), FNO_PYTHON (python3), OUT (/tmp/fno-zeroshot-out), LOGS (OUT/zeroshot; outside
# OUT leaves OUT with two files, zeroshot.jsonl and zeroshot.tgz), SCRATCH (the data, the
# model, the predictions; /tmp/fno-zeroshot-scratch, removed at the end unless KEEP=1),
# STEPS (default "train data predict neuralop"), MODEL_RUN, TRAIN_GRID (256), N_TRAIN (1000),
# EPOCHS (30), GRIDS ("512 1024 2048 4096"), WITH_8192 (0; 1 adds 8192 to GRIDS),
# N_TEST ("512:8 1024:8 2048:4 4096:4 8192:2": samples per grid; 4 for a grid not named),
# LIMIT (2GiB; the budget row's --gpu-memory-limit, "" for none), SNAP (256), DEVICE (default
# cuda; cpu with a small TRAIN_GRID and GRIDS tries the script anywhere, without the budget row
# unless LIMIT is set), TILE_ROWS (the budget row's --tile-rows: streamed tiles on the CPU too).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${FNO_BUILD_DIR:-/tmp/fno-zeroshot-build}
out=${OUT:-/tmp/fno-zeroshot-out}
scratch=${SCRATCH:-/tmp/fno-zeroshot-scratch}
logs=${LOGS:-$out/zeroshot}
rows=$out/zeroshot.jsonl
steps=" ${STEPS:-train data predict neuralop} "
device=${DEVICE:-cuda}
train_grid=${TRAIN_GRID:-256}
grids=${GRIDS:-512 1024 2048 4096}
[ "${WITH_8192:-0}" = 1 ] && grids="$grids 8192"
n_test=" ${N_TEST:-512:8 1024:8 2048:4 4096:4 8192:2} "
limit=${LIMIT-2GiB}
[ "$device" = cpu ] && limit=${LIMIT:-}  # (no GPU: the limit does not apply; only if asked)
py=${FNO_PYTHON:-python3}
mkdir -p "$out" "$logs" "$scratch"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$scratch"' EXIT
t_call=$(date +%s)

command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$logs/gpu.txt"

# 0. The build.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFNO_CUDA_KERNELS=ON \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFNO_PYTHON="$py" --log-level=WARNING > "$logs/configure.log" 2>&1 ||
    { tail -30 "$logs/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build "$build" --target fno_predict fno_train fno_datagen > "$logs/build.log" 2>&1 ||
  { tail -40 "$logs/build.log"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
bin=$build/apps
t_work=$(date +%s)

# $OUT/zeroshot.tgz: the logs folder (snapshots included) as zeroshot/, packed after each
# step (a device machine returns only a few files from $OUT).
pack() {
  tar -czf "$out/zeroshot.tgz.part" -C "$logs" --transform 's|^\.|zeroshot|' . &&
    mv "$out/zeroshot.tgz.part" "$out/zeroshot.tgz"
}

source "$root/bench/measure.sh"  # measure FILE COMMAND...

# The samples of a grid's test set.
samples_of() {
  local s
  for s in $n_test; do [ "${s%%:*}" = "$1" ] && echo "${s#*:}" && return; done
  echo 4
}

# 1. The model, trained at TRAIN_GRID^2.
run=${MODEL_RUN:-}
n_train=${N_TRAIN:-1000}
epochs=${EPOCHS:-30}
train_test=$scratch/darcy${train_grid}_test.h5
[ -z "$run" ] && [ -f "$scratch/run/model.pt" ] && run=$scratch/run &&
  echo "model: $run (an earlier call's)"
if [ -z "$run" ] && [[ "$steps" == *" train "* ]]; then
  t0=$(date +%s)
  rm -f "$scratch/darcy${train_grid}_train.h5" "$train_test"
  measure "$logs/datagen_train.m" "$bin/fno_datagen" --resolution "$train_grid" \
    --samples $((n_train + 32)) --test-samples 32 --seed 0 --device "$device" --progress none \
    --out "$scratch/darcy$train_grid.h5" > "$logs/datagen_train.log" 2>&1
  read -r gen_s _ rc < "$logs/datagen_train.m"
  [ "$rc" = 0 ] || { tail -5 "$logs/datagen_train.log"; exit 1; }
  run=$scratch/run
  rm -rf "$run"
  measure "$logs/train.m" "$bin/fno_train" --config configs/darcy.yaml --out "$run" \
    --set data.train_file="$scratch/darcy${train_grid}_train.h5" --set data.n_train="$n_train" \
    --set data.test='[{file: '"$train_test"', n_samples: 32, batch_size: 16}]' \
    --set training.epochs="$epochs" --set scheduler.T_max="$epochs" \
    --set device.name="$device" > "$logs/train.log" 2>&1
  read -r train_s _ rc < "$logs/train.m"
  [ "$rc" = 0 ] || { tail -5 "$logs/train.log"; exit 1; }
  cp "$run/config.yaml" "$run/summary.json" "$run/metrics.jsonl" "$logs/" 2> /dev/null
  "$py" - "$run/summary.json" "$train_grid" "$n_train" "$epochs" "$gen_s" "$train_s" << 'PY' |
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"row": "train", "grid": int(sys.argv[2]), "n_train": int(sys.argv[3]),
                  "epochs": int(sys.argv[4]), "datagen_s": float(sys.argv[5]),
                  "train_s": float(sys.argv[6]), "metrics": s.get("metrics"),
                  "device": s.get("device"), "n_params": s.get("n_params")}))
PY
    tee -a "$rows"
  echo "model: trained at ${train_grid}^2 in $(($(date +%s) - t0)) s ($run)"
  pack
fi
if [ -z "$run" ] && [[ "$steps" == *" predict "* || "$steps" == *" neuralop "* ]]; then
  echo "no model: STEPS has no 'train', SCRATCH has no run/model.pt and MODEL_RUN is unset"
  exit 1
fi

# 2. The test samples, solved, at each grid (kept from an earlier call when there).
if [[ "$steps" == *" data "* ]]; then
  for g in $grids; do
    f=$scratch/test$g.h5
    [ -f "$f" ] && { echo "data ${g}^2: $f (an earlier call's)"; continue; }
    n=$(samples_of "$g")
    measure "$logs/datagen$g.m" "$bin/fno_datagen" --resolution "$g" --samples "$n" --seed 7 \
      --batch "$n" --device "$device" --progress none --out "$f" > "$logs/datagen$g.log" 2>&1
    read -r wall rss rc < "$logs/datagen$g.m"
    echo "data ${g}^2: $n sample(s), exit $rc in $wall s"
    [ "$rc" = 0 ] || { tail -3 "$logs/datagen$g.log"; rm -f "$f"; }
  done
  pack
fi

# One prediction row: GRID INPUT BUDGET. BUDGET "none": the whole grid with the truth
# (--y-key sol: the errors), a snapshot of the first sample, the output kept for the next row;
# else fno_predict under --gpu-memory-limit BUDGET without the truth (streamed in tiles when the
# whole grid does not fit), its output compared with the whole grid's (max relative L2).
predict_row() {
  local g=$1 input=$2 budget=$3 wall rss rc
  local pred=$scratch/pred${g}_$budget.h5 log=$logs/predict${g}_$budget
  local whole=$scratch/pred${g}_none.h5 args=(--y-key sol)
  [ "$budget" = none ] || args=(--gpu-memory-limit "$budget")
  [ "$budget" != none ] && [ -n "${TILE_ROWS:-}" ] && args+=(--tile-rows "$TILE_ROWS")
  rm -f "$pred" "${pred%.h5}.summary.json"
  measure "$log.m" "$bin/fno_predict" --model "$run" --input "$input" --out "$pred" \
    --device "$device" --precision fp32 --batch-size 1 "${args[@]}" 2> "$log.log" > "$log.out"
  read -r wall rss rc < "$log.m"
  "$py" - "$g" "$budget" "$wall" "$rss" "$rc" "$log" "$pred" "$input" "$train_grid" "$whole" \
    "${SNAP:-256}" "$logs/snap_$g.npz" << 'PY' | tee -a "$rows"
import json, os, re, sys
g, budget, wall, rss, rc, log, pred, inp, tg, whole, side, npz = sys.argv[1:]
g, rc, side = int(g), int(rc), int(side)
text = open(log + ".log").read() + open(log + ".out").read()
plan = re.search(r"^fno_predict: plan: (.*)$", text, re.M)
peak = re.search(r"^gpu_peak_bytes (\d+)", text, re.M)
fwd = re.search(r"^forward_seconds (.*)$", text, re.M)
row = {"row": "zeroshot", "impl": "fno_predict", "grid": g, "train_grid": int(tg),
       "budget": budget, "precision": "fp32", "batch": 1, "exit": rc, "wall_s": float(wall),
       "host_peak_bytes": int(rss), "gpu_peak_bytes": int(peak.group(1)) if peak else 0,
       "forward_s": [float(t) for t in fwd.group(1).split()] if fwd else [],
       "plan": plan.group(1) if plan else "", "input": os.path.basename(inp)}
summary = pred[:-3] + ".summary.json"
if rc == 0 and os.path.exists(summary):
    s = json.load(open(summary))
    row.update({k: s[k] for k in ("n_samples", "mean_l2", "mean_h1", "l2", "h1")})
elif rc != 0:
    row["error"] = text.strip().splitlines()[-1][:300] if text.strip() else ""
if rc == 0 and budget != "none":
    import h5py, numpy as np
    with h5py.File(pred) as fb:
        row["n_samples"] = int(fb["pred"].shape[0])
        if os.path.exists(whole):
            with h5py.File(whole) as fw:
                d = 0.0
                for i in range(row["n_samples"]):
                    a, b = fb["pred"][i].astype(np.float64), fw["pred"][i].astype(np.float64)
                    d = max(d, float(np.linalg.norm(a - b) / np.linalg.norm(b)))
                row["max_rel_l2_vs_whole_grid"] = d
if rc == 0 and budget == "none":
    import h5py, numpy as np
    k = max(1, -(-g // side))  # the stride: at most side points a side
    c0 = max(0, g // 2 - side // 2)
    crop = np.s_[0, c0:c0 + side, c0:c0 + side]
    whole = np.s_[0, ::k, ::k]
    with h5py.File(inp) as fi, h5py.File(pred) as fp:
        a = {}
        for name, d in (("input", fi["coeff"]), ("truth", fi["sol"]), ("pred", fp["pred"])):
            a[name] = d[whole]
            a[name + "_crop"] = d[crop]
    a["error"] = a["pred"] - a["truth"]
    a["error_crop"] = a["pred_crop"] - a["truth_crop"]
    a = {n: v.astype(np.float16) for n, v in a.items()}
    np.savez_compressed(npz + ".part.npz", grid=g, stride=k, crop_start=c0,
                        l2=row.get("l2", [float("nan")])[0], **a)
    os.replace(npz + ".part.npz", npz)
    row["snapshot"] = os.path.basename(npz)
print(json.dumps(row))
PY
  [ "$rc" = 0 ] || tail -2 "$log.log"
  [ "$budget" = none ] || rm -f "$pred"
}

# 3. fno_predict at the training grid and at each grid, whole and under LIMIT.
if [[ "$steps" == *" predict "* ]]; then
  for g in "$train_grid" $grids; do
    input=$scratch/test$g.h5
    [ "$g" = "$train_grid" ] && input=$train_test
    [ -f "$input" ] || { echo "predict ${g}^2: no $input (made by STEPS train or data)"; continue; }
    predict_row "$g" "$input" none
    [ -n "$limit" ] && predict_row "$g" "$input" "$limit"
    rm -f "$scratch/pred${g}_none.h5" "$scratch/pred${g}_none.summary.json"
    pack
  done
fi

# 4. neuraloperator's forward of the same weights at each grid, batch 1.
if [[ "$steps" == *" neuralop "* ]]; then
  if [ -d .whl ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl > /dev/null 2>&1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if "$py" -c 'import neuralop' 2> "$logs/neuralop.log"; then
    nop=$scratch/nop
    "$py" bench/neuralop_predict.py model --from-config "$run/config.yaml" --out "$nop" \
      >> "$logs/neuralop.log" 2>&1
    # shellcheck disable=SC2086  # (the grids, one argument each)
    "$py" bench/neuralop_predict.py forward --model-dir "$nop" --state "$run/model.pt" \
      --resolutions "$train_grid" $grids --batch 1 --batches 2 --precision fp32 \
      --device "$device" --label "zeroshot" 2>> "$logs/neuralop.log" |
      "$py" -c 'import json, sys
for l in sys.stdin:
    print(json.dumps({"row": "neuralop", **json.loads(l)}), flush=True)' | tee -a "$rows"
  else
    echo "neuraloperator: not importable ($(tail -1 "$logs/neuralop.log")); no .whl/?"
  fi
fi
pack
echo "rows: $rows, $out/zeroshot.tgz; $(($(date +%s) - t_work)) s after the build, $(($(date +%s) - t_call)) s in all"
