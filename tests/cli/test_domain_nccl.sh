#!/usr/bin/env bash
# fno_train (and fno_predict, where it is built beside it) with
# distributed.domain_parallel over NCCL: one process per GPU
# under python -m torch.distributed.run, N = the world (2 GPUs, and 4 where
# there are), each rank its band of every sample, against one process on one
# GPU, fp32 (TF32 off): metrics.jsonl, summary.json's metrics, model.pt,
# normalizers.pt and predictions.h5 within 1e-5 relative
# (domain_compare.py). Offload policy none (the band in one tile) and auto
# (band 0's tiled plan on every rank), a 2D and a 3D model. Skipped (77) with
# fewer than 2 CUDA GPUs visible.
#   test_domain_nccl.sh BUILD_DIR|FNO_TRAIN [SOURCE_DIR [WORK_DIR [PYTHON]]]
# e.g. from the repository root: bash tests/cli/test_domain_nccl.sh build
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=$1
[ -d "$bin" ] && bin=$bin/apps/fno_train
src=${2:-$(cd "$here/../.." && pwd)}
work=${3:-${TMPDIR:-/tmp}/fno_domain_nccl}
python=${4:-${FNO_PYTHON:-$src/.venv/bin/python}}
[ -x "$bin" ] || { echo "test_domain_nccl: no fno_train at $bin"; exit 1; }
gpus=$("$python" -c "import torch; print(torch.cuda.device_count())" 2> /dev/null || echo 0)
if [ "${gpus:-0}" -lt 2 ]; then
  echo "test_domain_nccl: $gpus CUDA GPU(s) visible, 2 needed; skipped"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
source "$here/lib.sh"
export MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=4
base=$((20000 + $$ % 20000))
common=(--set device.name=cuda --set training.precision=fp32 --set output.progress=plain
  --set offload.plan_cache=none --set distributed.backend=nccl)
"$python" "$here/domain_data.py" "$src/data/darcy" "$work" || { echo "FAIL: making the data"; exit 1; }
cat > "$work/tiny.yaml" << EOF
model: {n_modes: [8, 8], hidden_channels: 16, n_layers: 3}
data:
  train_file: $work/train16.h5
  n_train: 48
  batch_size: 8
  n_predictions: 2
  test:
    - {file: $src/data/darcy/darcy_test_16.pt, n_samples: 16, batch_size: 4}
    - {file: $src/data/darcy/darcy_test_32.pt, n_samples: 8}
optimizer: {lr: 8.0e-3, weight_decay: 1.0e-4}
training: {epochs: 3, loss: h1, eval_losses: [h1, l2]}
EOF
cat > "$work/cube.yaml" << EOF
model: {n_modes: [4, 6, 4], hidden_channels: 8, n_layers: 2}
data:
  train_file: $work/cube.h5
  n_train: 16
  batch_size: 4
  n_predictions: 1
  test:
    - {file: $work/cube.h5, n_samples: 8}
optimizer: {lr: 8.0e-3}
training: {epochs: 2}
EOF

# one NAME CONFIG ARGS...: one process on GPU 0.
one() {
  local name=$1 cfg=$2; shift 2
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} "$bin" --config "$cfg" --out "$work/$name" \
    "${common[@]}" --set device.name=cuda:0 "$@" > "$work/$name.out" 2> "$work/$name.err" ||
    bad "one GPU $name: $(tail -3 "$work/$name.err")"
}
# split_run NAME RANKS BASELINE CONFIG ARGS...: RANKS processes, N = RANKS, vs BASELINE.
port=0
split_run() {
  local name=$1 n=$2 baseline=$3 cfg=$4 rc; shift 4
  port=$((port + 1))
  "$python" -m torch.distributed.run --no-python --nproc-per-node "$n" --master-port $((base + port)) \
    "$bin" --config "$cfg" --out "$work/$name" "${common[@]}" --set "distributed.domain_parallel=$n" \
    "$@" > "$work/$name.out" 2> "$work/$name.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then bad "$name exited $rc: $(grep -v '^\[' "$work/$name.err" | tail -3)"; return; fi
  if "$python" "$here/domain_compare.py" "$work/$name" "$work/$baseline" > "$work/$name.cmp"; then
    ok
    echo "$name: equal to $baseline within 1e-5"
  else
    bad "$name vs $baseline: $(cat "$work/$name.cmp")"
  fi
}

one one "$work/tiny.yaml"
one one_cube "$work/cube.yaml"
counts=(2)
[ "$gpus" -ge 4 ] && counts+=(4)
for n in "${counts[@]}"; do
  split_run "two_d_$n" "$n" one "$work/tiny.yaml"
  split_run "two_d_auto_$n" "$n" one "$work/tiny.yaml" --set offload.policy=auto
  split_run "cube_$n" "$n" one_cube "$work/cube.yaml"
done

# fno_predict --domain-parallel over NCCL: the runs above applied to an HDF5
# input (32 x 32 zero-shot, and the 3D set) by RANKS processes against one
# GPU, fp32: pred, l2, h1 and the summary's means within 1e-5 relative
# (predict_domain_compare.py).
predict=$(dirname "$bin")/fno_predict
if [ -x "$predict" ]; then
  "$python" - "$src/data/darcy/darcy_test_32.pt" "$work/test32.h5" << 'EOF'
import sys, torch, h5py
d = torch.load(sys.argv[1])
with h5py.File(sys.argv[2], "w") as f:
    f["coeff"] = d["x"][:16].float().numpy()
    f["sol"] = d["y"][:16].float().numpy()
EOF
  pcommon=(--precision fp32 --progress none --batch-size 4)
  predict_run() {
    local name=$1 n=$2 baseline=$3 rc; shift 3
    port=$((port + 1))
    "$python" -m torch.distributed.run --no-python --nproc-per-node "$n" --master-port $((base + port)) \
      "$predict" "${pcommon[@]}" --device cuda --domain-parallel "$n" --out "$work/$name.h5" "$@" \
      > "$work/$name.out" 2> "$work/$name.err"
    rc=$?
    if [ "$rc" -ne 0 ]; then bad "$name exited $rc: $(grep -v '^\[' "$work/$name.err" | tail -3)"; return; fi
    if "$python" "$here/predict_domain_compare.py" "$work/$name.h5" "$work/$baseline.h5" > "$work/$name.cmp"; then
      ok
      echo "$name: equal to $baseline within 1e-5"
    else
      bad "$name vs $baseline: $(cat "$work/$name.cmp")"
    fi
  }
  p2=(--model "$work/one" --input "$work/test32.h5" --y-key sol)
  p3=(--model "$work/one_cube" --input "$work/cube.h5" --y-key sol --samples 0:8)
  "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one.h5" "${p2[@]}" > /dev/null 2>&1 ||
    bad "one GPU fno_predict failed"
  "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one_cube.h5" "${p3[@]}" > /dev/null 2>&1 ||
    bad "one GPU fno_predict (3D) failed"
  for n in "${counts[@]}"; do
    predict_run "pred_two_d_$n" "$n" pred_one "${p2[@]}"
    predict_run "pred_cube_$n" "$n" pred_one_cube "${p3[@]}"
  done
else
  echo "test_domain_nccl: no fno_predict beside $bin; its part skipped"
fi
finish test_domain_nccl
