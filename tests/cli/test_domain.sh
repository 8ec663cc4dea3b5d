#!/usr/bin/env bash
# fno_train with distributed.domain_parallel (each sample's rows split over
# ranks), several processes under torchrun (python -m torch.distributed.run):
#   (1-4 under offload.policy none: each band's step is the whole band with
#   its activations kept, docs/domain_parallel.md)
#   1. 2 ranks, N=2, HDF5 training data read by hyperslab, per-channel
#      normalization, an H1 loss, test sets at 16 and 32 rows: metrics.jsonl,
#      summary.json's metrics, model.pt, normalizers.pt, the checkpoint and
#      predictions.h5 equal one process's within 1e-5 relative;
#   1b. the same as two hosts (torchrun --nnodes 2, c10d rendezvous over
#      loopback, one rank a node): equal to one process;
#   2. 3 ranks, N=3 on 16 rows (bands of 6, 5, 5), .pt data loaded and sliced,
#      pointwise normalization: equal to one process;
#   3. 4 ranks, N=2 (two shards of two bands): equal to one process with the
#      global batch;
#   4. a 3D model, 2 ranks, N=2: equal to one process;
#   4b. Navier-Stokes (data.problem ns, space_time: an FNO-3D over x, y, t)
#      on 2 ranks (data.subsample 2: the file loaded whole and cut; per-channel
#      normalization, an H1 loss) and 3 ranks (read by hyperslab, 16 rows in
#      bands of 6, 5, 5; pointwise normalization, the loss decoded), test
#      sets by `first` and n_samples: equal to one process, the per-record
#      errors (_l2_per_step, _l2_upto) too;
#   4c. Navier-Stokes, recurrent (the FNO-2D rolled out t_out steps, the loss
#      of every step): 2 ranks on 8 rows (loaded whole and cut; an H1 loss)
#      and 3 ranks on 16 rows (6, 5, 5, by hyperslab; an L2 loss): equal to one
#      process, the trajectory's L2 and the per-record errors too;
#   5. fixed offload policies: recompute in batch chunks runs each band as
#      its tiled plan (every block input remade, tiles of half the band) and
#      equals one process's recompute; blocks:2 runs as none on the CPU (one
#      line) and equals one process's none;
#   6. fp16 (the loss scaler's verdict shared by the ranks) and bf16: within
#      2e-3 and 2e-2 of one process in the same precision, the same loss
#      scales, and test metrics within 1% of one process's in fp32;
#   7. refusals, one line and a non-zero exit on every rank: a model that
#      cannot run tiled, a band thinner than the halo, modes past the grid;
#   8. a rank killed mid-run stops the other, naming it.
#   test_domain.sh FNO_TRAIN SOURCE_DIR WORK_DIR PYTHON [cpu|cuda]
set -u
bin=$1 src=$2 work=$3 python=$4 device=${5:-cpu}
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1
if ! "$python" -c "import torch.distributed.run, h5py" 2> /dev/null; then
  echo "test_domain: $python lacks torch.distributed.run or h5py; skipped"
  exit 77
fi
base=$((20000 + $$ % 20000))
port() { echo $((base + $1)); }
common=(--set "device.name=$device" --set output.progress=plain --set offload.plan_cache=none)

# The data: the shipped 16 x 16 Darcy set as HDF5, a tiny 3D set, a thin grid.
"$python" "$(dirname "${BASH_SOURCE[0]}")/domain_data.py" "$src/data/darcy" "$work" ||
  { echo "FAIL: making the data"; exit 1; }

cat > "$work/tiny.yaml" << EOF
model: {n_modes: [8, 8], hidden_channels: 8, n_layers: 2}
data:
  train_file: $work/train16.h5
  n_train: 48
  batch_size: 8
  n_predictions: 2
  test:
    - {file: $src/data/darcy/darcy_test_16.pt, n_samples: 8, batch_size: 4}
    - {file: $src/data/darcy/darcy_test_32.pt, n_samples: 4}
optimizer: {lr: 8.0e-3, weight_decay: 1.0e-4}
training: {epochs: 2, loss: h1, eval_losses: [h1, l2]}
EOF
cat > "$work/cube.yaml" << EOF
model: {n_modes: [6, 6, 4], hidden_channels: 6, n_layers: 2}
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
  n_predictions: 2
  test:
    - {file: $work/ns16.h5, name: ns, first: 12, n_samples: 4, batch_size: 2}
    - {file: $work/ns16.h5, name: head, n_samples: 4}
optimizer: {lr: 8.0e-3}
training: {epochs: 2, loss: h1, eval_losses: [l2, h1]}
EOF
write_nsr_config "$work/nsr.yaml" "$work/ns16.h5"

# one NAME CONFIG ARGS...: one process.
one() {
  local name=$1 cfg=$2; shift 2
  "$bin" --config "$cfg" --out "$work/$name" "${common[@]}" "$@" > "$work/$name.out" 2> "$work/$name.err" ||
    bad "one process $name: $(tail -3 "$work/$name.err")"
}
# ranks NAME N PORT CONFIG ARGS...: N ranks under torchrun.
ranks() {
  local name=$1 n=$2 p=$3 cfg=$4; shift 4
  "$python" -m torch.distributed.run --no-python --nproc-per-node "$n" --master-port "$(port "$p")" \
    "$bin" --config "$cfg" --out "$work/$name" "${common[@]}" "$@" > "$work/$name.out" 2> "$work/$name.err"
}
# Each check_run's outputs are compared with the baseline's at the end
# (compare_pairs, lib.sh; domain_compare.py: metrics.jsonl, summary.json,
# model.pt, normalizers.pt, predictions.h5 within 1e-5), all pairs at once.
pairs=()

# 1. Two ranks share each sample; HDF5 read by hyperslab.
one one "$work/tiny.yaml"
ranks two 2 1 "$work/tiny.yaml" --set distributed.domain_parallel=2
check_run two one $?
grep -q "domain parallel 2: rows \[0, 8) of 16" "$work/two.err" && ok || bad "rank 0's band not described: $(grep rank "$work/two.err" | head -2)"
grep -q '"domain_parallel": 2' "$work/two/summary.json" && ok || bad "summary.json lacks domain_parallel 2"

# 1b. Two hosts as torchrun starts them (--nnodes 2, c10d rendezvous), here two
#     node agents on one machine over loopback, one rank each, the two ranks
#     sharing each sample: equal to one process, as 1.
for node in 0 1; do
  "$python" -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$(port 20)" --rdzv-id "fno-domain-hosts-$$" --no-python "$bin" \
    --config "$work/tiny.yaml" --out "$work/nodes" "${common[@]}" \
    --set distributed.domain_parallel=2 > "$work/node$node.out" 2> "$work/node$node.err" &
  node_pid[node]=$!
done
rc=0
for node in 0 1; do wait "${node_pid[node]}" || rc=$?; done
cp "$work/node0.err" "$work/nodes.err" 2> /dev/null
check_run nodes one "$rc"

# 2. Three ranks on 16 rows, .pt data loaded and sliced, pointwise statistics.
pt=(--set "data.train_file=$src/data/darcy/darcy_train_16.pt" --set data.normalization=pointwise
  --set 'data.test=[{file: '"$src"'/data/darcy/darcy_test_16.pt, n_samples: 8}]')
one one_pt "$work/tiny.yaml" "${pt[@]}"
ranks three 3 2 "$work/tiny.yaml" "${pt[@]}" --set distributed.domain_parallel=3
check_run three one_pt $?

# 3. Four ranks: two shards of two bands, against one process with their global batch.
one one_b16 "$work/tiny.yaml" --set data.batch_size=16
ranks four 4 3 "$work/tiny.yaml" --set distributed.domain_parallel=2
check_run four one_b16 $?

# 4. A 3D model.
one one_cube "$work/cube.yaml"
ranks cube 2 4 "$work/cube.yaml" --set distributed.domain_parallel=2
check_run cube one_cube $?

# 4b. Navier-Stokes, space_time: 2 ranks on 8 rows (every second of the
#     file's, loaded whole), and 3 ranks on 16 rows (6, 5, 5) by hyperslab.
one one_ns "$work/ns.yaml" --set data.subsample=2
ranks ns2 2 12 "$work/ns.yaml" --set data.subsample=2 --set distributed.domain_parallel=2
check_run ns2 one_ns $?
nsp=(--set data.normalization=pointwise --set training.loss=l2 --set training.loss_on=decoded)
one one_ns_pw "$work/ns.yaml" "${nsp[@]}"
ranks ns3 3 13 "$work/ns.yaml" "${nsp[@]}" --set distributed.domain_parallel=3
check_run ns3 one_ns_pw $?
grep -q "domain parallel 3: rows \[0, 6) of 16" "$work/ns3.err" && ok || bad "ns3: rank 0's band not described: $(grep rank "$work/ns3.err" | head -3)"
grep -q '"ns_l2_per_step": \[' "$work/ns3/metrics.jsonl" && grep -q '"head_l2_upto": \[' "$work/ns3/metrics.jsonl" &&
  ok || bad "ns3: metrics.jsonl lacks the per-record errors"

# 4c. Navier-Stokes, recurrent: 2 ranks on 8 rows (loaded whole and cut), and
#     3 ranks on 16 rows (6, 5, 5) by hyperslab.
one one_nsr "$work/nsr.yaml" --set data.subsample=2
ranks nsr2 2 14 "$work/nsr.yaml" --set data.subsample=2 --set distributed.domain_parallel=2
check_run nsr2 one_nsr $?
one one_nsr_l2 "$work/nsr.yaml" --set training.loss=l2
ranks nsr3 3 15 "$work/nsr.yaml" --set training.loss=l2 --set distributed.domain_parallel=3
check_run nsr3 one_nsr_l2 $?
grep -q "domain parallel 3: rows \[0, 6) of 16" "$work/nsr3.err" && ok || bad "nsr3: rank 0's band not described: $(grep rank "$work/nsr3.err" | head -3)"
grep -q '"ns_l2": ' "$work/nsr3/metrics.jsonl" && grep -q '"ns_l2_per_step": \[' "$work/nsr3/metrics.jsonl" &&
  grep -q '"head_l2_upto": \[' "$work/nsr3/metrics.jsonl" &&
  ok || bad "nsr3: metrics.jsonl lacks the trajectory's or the per-record errors"

# 5. Fixed offload policies: each rank's band runs the policy's tiled plan.
one one_rc "$work/tiny.yaml" --set offload.policy=recompute --set offload.chunks=2
ranks rc 2 7 "$work/tiny.yaml" --set offload.policy=recompute --set offload.chunks=2 \
  --set distributed.domain_parallel=2
check_run rc one_rc $?
grep -q "^offload policy recompute: each rank's band of rows in tiled micro_batches=1; tile_rows=4, inputs=recompute/recompute, gradient=device" "$work/rc.err" &&
  ok || bad "recompute's tiled plan not said: $(grep -i "offload" "$work/rc.err" | head -2)"
ranks blocks 2 8 "$work/tiny.yaml" --set offload.policy=blocks:2 --set distributed.domain_parallel=2
check_run blocks one $?
grep -q "offload.policy blocks:2: no CUDA device, so nothing is offloaded; training with offload.policy none" "$work/blocks.err" &&
  ok || bad "blocks:2 on the CPU: no line saying it runs as none: $(grep -i "offload" "$work/blocks.err" | head -2)"

metric() { grep -o "\"$2\": [0-9.e+-]*" "$1/summary.json" | head -1 | awk '{print $2}'; }
# 6. fp16 and bf16 against one process in the same precision: their sums in
#    another order (on the CPU about 1e-3 in fp16's optimizer state, 7e-3 in bf16's).
slot=10
for p in fp16:2e-3 bf16:2e-2; do
  tol=${p#*:} p=${p%:*}
  one "one_$p" "$work/tiny.yaml" --set "training.precision=$p"
  ranks "$p" 2 $((slot++)) "$work/tiny.yaml" --set "training.precision=$p" \
    --set distributed.domain_parallel=2
  rc=$?
  if [ "$rc" -ne 0 ]; then bad "$p exited $rc: $(grep -v '^\[' "$work/$p.err" | tail -3)"; continue; fi
  compare_pairs "$work/compare_$p.txt" domain_compare.py --tol "$tol" "$work/$p" "$work/one_$p"
  # ... and near fp32's (one process): the test metrics within 1%.
  for m in 16_h1 32_l2; do
    a=$(metric "$work/one" $m) b=$(metric "$work/$p" $m)
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > 0 && b <= 1.01 * a && b >= a / 1.01) }' &&
      ok || bad "$p on 2 ranks: $m $b against fp32's $a"
  done
done
grep -q '"loss_scale": ' "$work/fp16/metrics.jsonl" && ok || bad "fp16: metrics.jsonl lacks the loss scale"

# 7. Refusals: one line, exit 2 on every rank. Those that need no data come
#    before the rendezvous (one rank alone shows it); the grid's need both.
refuse() {
  local pattern=$1; shift
  MASTER_PORT=$(port 9) WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 expect 2 "$pattern" -- \
    --config "$work/tiny.yaml" --out "$work/refused" "${common[@]}" --set distributed.domain_parallel=2 "$@"
}
refuse "distributed.domain_parallel: 2: tiled execution does not support model.domain_padding" \
  --set 'model.domain_padding=[0.25, 0.25]'
both_refuse() {
  local name=$1 pattern=$2 rc; shift 2
  ranks "$name" 2 5 "$work/tiny.yaml" --set distributed.domain_parallel=2 --set distributed.timeout_s=20 "$@"
  rc=$?
  local lines
  lines=$(grep -c "^fno_train: .*$pattern" "$work/$name.err")
  if [ "$rc" -ne 0 ] && [ "$lines" -eq 2 ]; then ok; else bad "$name: exit $rc, $lines ranks said '$pattern': $(grep -v '^\[' "$work/$name.err" | tail -4)"; fi
}
both_refuse thin "bands of 1 rows, thinner than the loss's halo of 2 rows" \
  --set "data.train_file=$work/thin.h5" --set 'model.n_modes=[2, 8]' --set 'data.test=[]'
both_refuse modes "model.n_modes\[0\] = 32 exceeds the grid's 16 points" --set 'model.n_modes=[32, 8]'

# 8. A rank killed mid-run: the other stops within 60 s, naming it (from a
#    band sum, its domain group's, or the gradients' all-reduce, the world's).
long=(--config "$work/tiny.yaml" "${common[@]}" --set training.epochs=500 --set distributed.domain_parallel=2
  --set distributed.timeout_s=30 --out "$work/kill")
MASTER_PORT=$(port 6) WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$bin" "${long[@]}" > "$work/kill0.out" 2> "$work/kill0.err" &
r0=$!
MASTER_PORT=$(port 6) WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 "$bin" "${long[@]}" > "$work/kill1.out" 2> "$work/kill1.err" &
r1=$!
for _ in $(seq 1 3000); do [ -s "$work/kill/metrics.jsonl" ] && break; sleep 0.02; done
kill -9 "$r1"
t0=$(date +%s)
rc=0
wait "$r0" || rc=$?
wait "$r1" 2> /dev/null
secs=$(($(date +%s) - t0))
last=$(tail -1 "$work/kill0.err")
if [ "$rc" -eq 5 ] && [ "$secs" -lt 60 ] && echo "$last" | grep -q "^fno_train: rank 0\( (domain0 rank 0)\)\?: .*failed (rank 1 stopped responding)"; then ok; else
  bad "band rank 1 killed: rank 0 exited $rc after $secs s: $last"
fi
wait 2> /dev/null

# The equalities of 1-5.
compare_pairs "$work/compare.txt" domain_compare.py "${pairs[@]}"
[ "$(grep -cE '^(ok|differ) ' "$work/compare.txt")" -eq $((${#pairs[@]} / 2)) ] ||
  bad "domain_compare.py: $(tail -3 "$work/compare.txt")"

finish test_domain
