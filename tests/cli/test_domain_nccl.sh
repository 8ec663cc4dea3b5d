#!/usr/bin/env bash
# fno_train (and fno_predict, where it is built beside it) with
# distributed.domain_parallel over NCCL: one process per GPU
# under python -m torch.distributed.run, N = the world (2 GPUs, and 4 where
# there are), each rank its band of every sample, against one process on one
# GPU, fp32 (TF32 off): metrics.jsonl, summary.json's metrics, model.pt,
# normalizers.pt and predictions.h5 within 1e-5 relative
# (domain_compare.py). Offload policy none (the whole band, activations
# kept) and auto (the whole band where rank 0 estimates it to fit, else band
# 0's tiled plan, on every rank), a 2D and a 3D model, Navier-Stokes
# (space_time: the FNO-3D over x, y, t, its per-record errors summed over the
# band on the stream; recurrent: the FNO-2D rolled out, every step's forward
# on the band, the trajectory's errors summed likewise), benchmark data (The
# Well's layout: the VRMSE per field and the rollout; fno_predict --rollout
# too, and on 4 GPUs as two sample groups of 2); on 2 GPUs each
# fixed policy, chunks and micro-batches, and fp16 (within 2e-2 of one GPU in
# fp16). Then a band rank killed mid-training (SIGKILL to rank 1, then to
# rank 0, which hosts the store) while the band sums are in flight on the
# stream: the other exits 5 within the timeout and a margin, its last line
# naming the lost rank, no hang and no abort. Skipped (77) with fewer than 2
# CUDA GPUs visible.
#   test_domain_nccl.sh BUILD_DIR|FNO_TRAIN [SOURCE_DIR [WORK_DIR [PYTHON]]]
# e.g. from the repository root: bash tests/cli/test_domain_nccl.sh build
# DOMAIN_NCCL_PARTS picks the parts (default all: "split policies fp16 cube
# ns kill bench predict"; the one-GPU baselines of `split` run for `predict`
# too, and `bench`'s run for `predict`'s benchmark case where both are picked).
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
cat > "$work/ns.yaml" << EOF
model: {n_modes: [6, 6, 4], in_channels: 4, out_channels: 1, hidden_channels: 8, n_layers: 2}
data:
  problem: ns
  ns_mode: space_time
  t_in: 4
  t_out: 4
  train_file: $work/ns16.h5
  n_train: 12
  batch_size: 4
  encode_input: true
  encode_output: true
  normalization: pointwise
  n_predictions: 2
  test:
    - {file: $work/ns16.h5, name: ns, first: 12, n_samples: 4, batch_size: 2}
optimizer: {lr: 8.0e-3}
training: {epochs: 2, loss: l2, loss_on: decoded, eval_losses: [l2, h1]}
EOF
write_nsr_config "$work/nsr.yaml" "$work/ns16.h5"

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

parts=" ${DOMAIN_NCCL_PARTS:-split policies fp16 cube ns kill bench predict} "
part() { [[ "$parts" == *" $1 "* ]]; }
counts=(2)
[ "$gpus" -ge 4 ] && counts+=(4)
if part split || part predict; then
  one one "$work/tiny.yaml"
  one one_cube "$work/cube.yaml"
fi
if part split; then
  for n in "${counts[@]}"; do
    split_run "two_d_$n" "$n" one "$work/tiny.yaml"
    split_run "two_d_auto_$n" "$n" one "$work/tiny.yaml" --set offload.policy=auto
    split_run "cube_$n" "$n" one_cube "$work/cube.yaml"
  done
fi

# --- The fixed offload policies and fp16 on 2 GPUs (docs/domain_parallel.md) ---
# Each fixed policy trains each band in its tiled plan (all, blocks:2 and
# recompute+offload keep block inputs in pinned host memory, recompute remakes
# them per tile; offload.chunks become tiles of rows): equal to one GPU under
# the same policy within 1e-5. fp16: the ranks share the loss scaler's
# verdict; within 2e-2 of one GPU in fp16, the same loss scales.
# near_run NAME BASELINE TOL CONFIG ARGS...: 2 processes, N = 2, vs BASELINE within TOL.
near_run() {
  local name=$1 baseline=$2 tol=$3 cfg=$4 rc; shift 4
  port=$((port + 1))
  "$python" -m torch.distributed.run --no-python --nproc-per-node 2 --master-port $((base + port)) \
    "$bin" --config "$cfg" --out "$work/$name" "${common[@]}" --set distributed.domain_parallel=2 \
    "$@" > "$work/$name.out" 2> "$work/$name.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then bad "$name exited $rc: $(grep -v '^\[' "$work/$name.err" | tail -3)"; return; fi
  if "$python" "$here/domain_compare.py" --tol "$tol" "$work/$name" "$work/$baseline" > "$work/$name.cmp"; then
    ok
    echo "$name: equal to $baseline within $tol"
  else
    bad "$name vs $baseline: $(cat "$work/$name.cmp")"
  fi
}
# policy_run POLICY PLAN ARGS...: one GPU and 2 ranks under POLICY; rank 0 names PLAN.
policy_run() {
  local policy=$1 plan=$2 tag; shift 2
  tag=pol_$(echo "$policy $*" | tr -c 'a-z0-9' _)
  one "one_$tag" "$work/tiny.yaml" --set "offload.policy=$policy" "$@"
  near_run "$tag" "one_$tag" 1e-5 "$work/tiny.yaml" --set "offload.policy=$policy" "$@"
  grep -q "^offload policy $policy: each rank's band of rows in tiled $plan" "$work/$tag.err" && ok ||
    bad "$tag: rank 0 did not name '$plan': $(grep -i "offload" "$work/$tag.err" | head -2)"
}
if part policies; then
  policy_run all "micro_batches=1; tile_rows=8, inputs=host/host/host, gradient=device"
  policy_run blocks:2 "micro_batches=1; tile_rows=8, inputs=host/device/device, gradient=device"
  policy_run slim "micro_batches=1; tile_rows=8, inputs=default, gradient=device"
  policy_run recompute "micro_batches=1; tile_rows=8, inputs=recompute/recompute/recompute"
  policy_run recompute+offload "micro_batches=2; tile_rows=4, inputs=host/host/host" \
    --set offload.chunks=2 --set offload.micro_batches=2
fi
if part fp16; then
  one one_fp16 "$work/tiny.yaml" --set training.precision=fp16
  near_run fp16_2 one_fp16 2e-2 "$work/tiny.yaml" --set training.precision=fp16
  one one_fp16_blocks "$work/tiny.yaml" --set training.precision=fp16 --set offload.policy=blocks:3
  near_run fp16_blocks_2 one_fp16_blocks 2e-2 "$work/tiny.yaml" --set training.precision=fp16 \
    --set offload.policy=blocks:3
fi
if part cube; then
  one one_cube_recompute "$work/cube.yaml" --set offload.policy=recompute+offload
  near_run cube_recompute_2 one_cube_recompute 1e-5 "$work/cube.yaml" --set offload.policy=recompute+offload
fi
if part ns || part predict; then  # Navier-Stokes, space_time and recurrent, N = the world
  one one_ns "$work/ns.yaml"
fi
if part ns; then
  for n in "${counts[@]}"; do split_run "ns_$n" "$n" one_ns "$work/ns.yaml"; done
  one one_nsr "$work/nsr.yaml"
  for n in "${counts[@]}"; do split_run "nsr_$n" "$n" one_nsr "$work/nsr.yaml"; done
fi

# A rank lost mid-training: the survivor exits 5 within 60 s (timeout 30 s and
# the heartbeat check), one line naming the lost rank; `timeout` ends a hang.
now_ms() { echo $(($(date +%s%N) / 1000000)); }
long=(--config "$work/tiny.yaml" "${common[@]}" --set training.epochs=2000
  --set distributed.domain_parallel=2 --set distributed.timeout_s=30)
part kill && for victim in 1 0; do
  survivor=$((1 - victim))
  port=$((port + 1))
  rm -rf "$work/kill$victim"
  pids=()
  for r in 0 1; do
    MASTER_PORT=$((base + port)) WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
      timeout -s KILL 150 "$bin" "${long[@]}" --out "$work/kill$victim" \
      > "$work/kill${victim}_r$r.out" 2> "$work/kill${victim}_r$r.err" &
    pids[r]=$!
  done
  for _ in $(seq 1 6000); do [ -s "$work/kill$victim/metrics.jsonl" ] && break; sleep 0.02; done
  # Mid-step, with sums in flight: a little past the first epoch's end.
  sleep 0.3
  # (pids[] are `timeout`'s, which guards a hang: the rank is its child)
  pkill -KILL -P "${pids[$victim]}"
  t0=$(now_ms)
  rc=0
  wait "${pids[$survivor]}" || rc=$?
  ms=$(($(now_ms) - t0))
  wait "${pids[$victim]}" 2> /dev/null
  err=$work/kill${victim}_r$survivor.err
  last=$(tail -1 "$err")
  echo "kill rank $victim: rank $survivor exited $rc after $ms ms: $last"
  if [ "$rc" -eq 5 ] && [ "$ms" -lt 60000 ] &&
    echo "$last" | grep -q "^fno_train: rank $survivor.*failed.*rank $victim" &&
    ! grep -qE "terminate called|Aborted|core dumped|Segmentation" "$err"; then
    ok
  else
    bad "band rank $victim killed: rank $survivor exited $rc after $ms ms (137: hung until killed): $last"
  fi
done

# Benchmark data (data.format well, The Well's layout at 8 x 8): training by
# RANKS processes against one GPU (the VRMSE per field, one step and rolled
# out, with the band's sums on the GPU), and fno_predict --rollout likewise.
if part bench; then
  make_well_set "$work/well" "$work/well.yaml" || bad "making the Well set"
  one one_well "$work/well.yaml"
  for n in "${counts[@]}"; do split_run "well_$n" "$n" one_well "$work/well.yaml"; done
fi

# fno_predict --domain-parallel over NCCL: the runs above applied to an HDF5
# input (32 x 32 zero-shot, and the 3D set) by RANKS processes against one
# GPU, fp32: pred, l2, h1 and the summary's means within 1e-5 relative
# (predict_domain_compare.py); likewise the Navier-Stokes space_time run and
# a recurrent one (the FNO-2D rolled out on each band) on ns16.h5's records,
# with l2_per_record.
predict=$(dirname "$bin")/fno_predict
if ! part predict; then
  :
elif [ -x "$predict" ]; then
  "$python" - "$src/data/darcy/darcy_test_32.pt" "$work/test32.h5" << 'EOF'
import sys, torch, h5py
d = torch.load(sys.argv[1])
with h5py.File(sys.argv[2], "w") as f:
    f["coeff"] = d["x"][:16].float().numpy()
    f["sol"] = d["y"][:16].float().numpy()
EOF
  pcommon=(--precision fp32 --progress none --batch-size 4)
  # predict_run NAME RANKS BASELINE ARGS...: RANKS processes, N = RANKS (or $DP), vs BASELINE.
  predict_run() {
    local name=$1 n=$2 baseline=$3 rc; shift 3
    port=$((port + 1))
    "$python" -m torch.distributed.run --no-python --nproc-per-node "$n" --master-port $((base + port)) \
      "$predict" "${pcommon[@]}" --device cuda --domain-parallel "${DP:-$n}" --out "$work/$name.h5" "$@" \
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
  one one_nsrec "$work/ns.yaml" --set data.ns_mode=recurrent --set 'model.n_modes=[6, 6]' \
    --set data.encode_input=false --set data.encode_output=false --set 'training.eval_losses=[l2]'
  pns=(--model "$work/one_ns" --input "$work/ns16.h5" --y-key u --samples 9:7)
  pnr=(--model "$work/one_nsrec" --input "$work/ns16.h5" --y-key u --samples 9:7)
  "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one.h5" "${p2[@]}" > /dev/null 2>&1 ||
    bad "one GPU fno_predict failed"
  "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one_cube.h5" "${p3[@]}" > /dev/null 2>&1 ||
    bad "one GPU fno_predict (3D) failed"
  "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one_ns.h5" "${pns[@]}" > /dev/null 2>&1 ||
    bad "one GPU fno_predict (Navier-Stokes space_time) failed"
  "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one_nsrec.h5" "${pnr[@]}" > /dev/null 2>&1 ||
    bad "one GPU fno_predict (Navier-Stokes recurrent) failed"
  if part bench; then  # (a benchmark run: one step and rolled out, band sums on the GPU)
    pw=(--model "$work/one_well" --input "$work/well" --rollout)
    "$predict" "${pcommon[@]}" --device cuda:0 --out "$work/pred_one_well.h5" "${pw[@]}" \
      > /dev/null 2>&1 || bad "one GPU fno_predict (benchmark run) failed"
  fi
  for n in "${counts[@]}"; do
    if part bench; then predict_run "pred_well_$n" "$n" pred_one_well "${pw[@]}"; fi
    predict_run "pred_two_d_$n" "$n" pred_one "${p2[@]}"
    predict_run "pred_cube_$n" "$n" pred_one_cube "${p3[@]}"
    predict_run "pred_ns_$n" "$n" pred_one_ns "${pns[@]}"
    predict_run "pred_nsrec_$n" "$n" pred_one_nsrec "${pnr[@]}"
  done
  # (a benchmark run on 4 GPUs as two sample groups of 2: the windows and trajectories split)
  if part bench && [ "$gpus" -ge 4 ]; then DP=2 predict_run pred_well_groups 4 pred_one_well "${pw[@]}"; fi
else
  echo "test_domain_nccl: no fno_predict beside $bin; its part skipped"
fi
finish test_domain_nccl
