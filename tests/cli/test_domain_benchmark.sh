#!/usr/bin/env bash
# fno_train with distributed.domain_parallel on benchmark data (data.format),
# under torchrun (python -m torch.distributed.run) with Gloo:
#   1. The Well's layout (bench/make_well_set.py) on an 8 x 8 grid: 2 ranks
#      (bands of 4, 4) and 3 ranks (3, 3, 2), per-field statistics; 3 ranks
#      with pointwise statistics and the loss decoded: metrics.jsonl (the
#      training loss per epoch), summary.json's metrics (the VRMSE per field,
#      one step and rolled out), model.pt, normalizers.pt, the checkpoint
#      and predictions.h5 equal one process's within 1e-5 relative;
#   1b. 4 ranks as two sample groups of two bands, and 1c. 2 ranks of data
#      parallel alone (the benchmark's metric shared by the ranks): equal to
#      one process with their global batch;
#   2. PDEBench (2D_CFD_tiny, nRMSE) on 2 ranks, PDEArena on 3 (8 rows:
#      3, 3, 2) with a scalar input (buo_y) and a horizon of 2, and the
#      shipped Well files (a constant field, a vector field, a scalar) on 2:
#      equal to one process;
#   3. refusals, one line on every rank and a non-zero exit: data.stream on
#      (and auto past data.host_memory_limit: a band's rows of the windows), and
#      model.domain_padding_auto on a file with a wall.
#   test_domain_benchmark.sh FNO_TRAIN SOURCE_DIR WORK_DIR PYTHON
set -u
bin=$1 src=$2 work=$3 python=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1
if ! "$python" -c "import torch.distributed.run, h5py" 2> /dev/null; then
  echo "test_domain_benchmark: $python lacks torch.distributed.run or h5py; skipped"
  exit 77
fi
base=$((20000 + ($$ + 7919) % 20000))
port() { echo $((base + $1)); }
common=(--set device.name=cpu --set output.progress=plain --set offload.plan_cache=none)

make_well_set "$work/well" "$work/well.yaml" || { echo "FAIL: making the data"; exit 1; }
pde=(--config "$src/configs/pdebench_tiny.yaml" --set training.epochs=2 --set data.n_predictions=2
  --set "data.train_file=$src/tests/golden/benchmarks/pdebench/2D_CFD_tiny.hdf5"
  --set 'data.test=[{file: '"$src"'/tests/golden/benchmarks/pdebench/2D_CFD_tiny.hdf5, split: test, name: test}]')

one() {
  local name=$1; shift
  "$bin" --out "$work/$name" "${common[@]}" "$@" > "$work/$name.out" 2> "$work/$name.err" ||
    bad "one process $name: $(tail -3 "$work/$name.err")"
}
ranks() {
  local name=$1 n=$2 p=$3; shift 3
  "$python" -m torch.distributed.run --no-python --nproc-per-node "$n" --master-port "$(port "$p")" \
    "$bin" --out "$work/$name" "${common[@]}" "$@" > "$work/$name.out" 2> "$work/$name.err"
}
pairs=()  # (check_run, compare_pairs: lib.sh)

# 1. The Well's layout, 8 rows: 2 and 3 ranks.
one one_well --config "$work/well.yaml"
ranks well2 2 1 --config "$work/well.yaml" --set distributed.domain_parallel=2
check_run well2 one_well $?
ranks well3 3 2 --config "$work/well.yaml" --set distributed.domain_parallel=3
check_run well3 one_well $?
grep -q "domain parallel 3: rows \[0, 3) of 8" "$work/well3.err" && ok || bad "well3: rank 0's band not described"
for key in valid_vrmse_field0 valid_rollout_vrmse_field1 valid_rollout_vrmse; do
  grep -q "\"$key\": [0-9]" "$work/well3/summary.json" && ok || bad "well3: summary.json lacks $key"
done
pw=(--set data.normalization=pointwise --set data.encode_output=true --set training.loss_on=decoded)
one one_well_pw --config "$work/well.yaml" "${pw[@]}"
ranks well3_pw 3 3 --config "$work/well.yaml" "${pw[@]}" --set distributed.domain_parallel=3
check_run well3_pw one_well_pw $?

# 1b. Two sample groups of two bands, against one process with their global batch.
one one_well_b8 --config "$work/well.yaml" --set data.batch_size=8
ranks well4 4 6 --config "$work/well.yaml" --set distributed.domain_parallel=2
check_run well4 one_well_b8 $?
# 1c. Data parallel alone, 2 ranks: the benchmark's metric shared by them (each its windows
#     and its trajectory), against the same one process.
ranks well_dp 2 9 --config "$work/well.yaml"
check_run well_dp one_well_b8 $?

# 2. PDEBench (nRMSE), 6 rows on 2 ranks; PDEArena, 8 rows on 3.
one one_pde "${pde[@]}"
ranks pde2 2 4 "${pde[@]}" --set distributed.domain_parallel=2
check_run pde2 one_pde $?
grep -q '"test_rollout_nrmse_Vx": [0-9]' "$work/pde2/summary.json" && ok || bad "pde2: no rollout nRMSE"
arena=(--config "$src/configs/pdearena_tiny.yaml" --set training.epochs=2 --set data.n_predictions=2
  --set "data.train_file=$src/tests/golden/benchmarks/pdearena"
  --set 'data.test=[{file: '"$src"'/tests/golden/benchmarks/pdearena, split: valid, name: valid}]'
  --set 'data.scalars=[buo_y]' --set model.in_channels=7 --set data.horizon=2 --set model.out_channels=6)
one one_arena "${arena[@]}"
ranks arena3 3 7 "${arena[@]}" --set distributed.domain_parallel=3
check_run arena3 one_arena $?
grep -q '"valid_rollout_vrmse_vy": [0-9]' "$work/arena3/summary.json" && ok || bad "arena3: no rollout VRMSE"
# The shipped Well files (6 x 8): a field constant in time (viscosity), a
# vector field and a scalar input (reynolds), each read by rows, on 2 ranks.
gw=(--config "$src/configs/well_tiny.yaml" --set training.epochs=2 --set data.n_predictions=2
  --set "data.train_file=$src/tests/golden/benchmarks/well"
  --set 'data.test=[{file: '"$src"'/tests/golden/benchmarks/well, split: valid, name: valid}]'
  --set 'data.scalars=[reynolds]' --set model.in_channels=10)
one one_gw "${gw[@]}"
ranks gw2 2 8 "${gw[@]}" --set distributed.domain_parallel=2
check_run gw2 one_gw $?

# 3. Refusals on both ranks.
both_refuse() {
  local name=$1 pattern=$2 rc lines; shift 2
  ranks "$name" 2 5 --set distributed.domain_parallel=2 --set distributed.timeout_s=20 "$@"
  rc=$?
  lines=$(grep -c "^fno_train: .*$pattern" "$work/$name.err")
  if [ "$rc" -ne 0 ] && [ "$lines" -eq 2 ]; then ok; else
    bad "$name: exit $rc, $lines ranks said '$pattern': $(grep -v '^\[' "$work/$name.err" | tail -4)"
  fi
}
both_refuse stream "data.stream on: benchmark windows are held in memory" \
  --config "$work/well.yaml" --set data.stream=on
both_refuse stream_auto "data.stream auto: a band's rows of the training split's windows take" \
  --config "$work/well.yaml" --set data.host_memory_limit=4000
both_refuse padding "model.domain_padding_auto pads a non-periodic dim" \
  --config "$src/configs/well_tiny.yaml" --set "data.train_file=$src/tests/golden/benchmarks/well" \
  --set 'data.test=[]' --set model.domain_padding_auto=0.25

compare_pairs "$work/compare.txt" domain_compare.py "${pairs[@]}"
[ "$(grep -cE '^(ok|differ) ' "$work/compare.txt")" -eq $((${#pairs[@]} / 2)) ] ||
  bad "domain_compare.py: $(tail -3 "$work/compare.txt")"

finish test_domain_benchmark
