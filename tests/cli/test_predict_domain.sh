#!/usr/bin/env bash
# fno_predict --domain-parallel (each sample's rows split over ranks) under
# torchrun (python -m torch.distributed.run), against one process:
#   1. 2 ranks, N=2, an HDF5 input at 32x32 (zero-shot) read by hyperslab,
#      with the truth: pred, l2, h1 and the summary's means within 1e-5
#      relative; again with tiles of 4 rows within each band;
#   2. 3 ranks, N=3 on 16 rows (bands of 6, 5, 5: uneven), a .pt input
#      loaded and cut, a run with pointwise normalizers: equal;
#   3. 4 ranks, N=2: two sample groups of two bands, 7 samples (4 and 3):
#      equal; 2 ranks, N=1 (data parallel alone): equal; without the truth
#      (no errors, no summary): equal;
#   4. a 3D model, 2 ranks, N=2: equal;
#   4b. Navier-Stokes runs (data.problem ns) on 16 x 16 records: space_time
#      (FNO-3D over x, y, t, with normalizers) and recurrent (FNO-2D rolled
#      out on raw records), each by 2 ranks and by 3 (bands of 6, 5, 5)
#      against one process with the truth (pred, l2, h1, l2_per_record, the
#      summary's means and l2_per_record: equal); 4 ranks as two sample
#      groups; without the truth; two input files; a copy of the space-time
#      run at data.subsample 2 (the records loaded whole and cut); refused on
#      both ranks in one line: a band thinner than a tile, samples past the
#      file's, records of the wrong rank;
#   4c. benchmark runs (data.format well, 8 x 8): 2 ranks, 3 ranks (bands of
#      3, 3, 2) with pointwise normalizers, one step and --rollout, a range
#      of windows: pred, rollout, the VRMSE per window and the summary's
#      metric per field equal; 4 ranks as two sample groups of 2, and 3 as
#      three groups of 1 (one with no trajectory to roll out), likewise;
#   5. refusals, one line and exit 2: N that does not divide the world,
#      torchrun without --domain-parallel, CUDA graphs on, --rollout of a
#      run not on benchmark data (one
#      rank, before the rendezvous); a band thinner than a tile (both ranks);
#   6. an existing --out (not fno_predict's) is refused and left as it was;
#      --overwrite replaces an output;
#   7. --timeout: a rank whose peer never starts stops within it, one line.
#   test_predict_domain.sh FNO_PREDICT FNO_TRAIN SOURCE_DIR WORK_DIR PYTHON [cpu|cuda]
set -u
bin=$1 train=$2 src=$3 work=$4 python=$5 device=${6:-cpu}
rm -rf "$work" && mkdir -p "$work"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
export OMP_NUM_THREADS=1 MASTER_ADDR=127.0.0.1
if ! "$python" -c "import torch.distributed.run, h5py" 2> /dev/null; then
  echo "test_predict_domain: $python lacks torch.distributed.run or h5py; skipped"
  exit 77
fi
base=$((20000 + $$ % 20000))
port() { echo $((base + $1)); }

# The data: domain_data.py's (train16.h5, cube.h5), and the shipped 32 x 32
# test set as HDF5 (coeff/sol).
"$python" "$here/domain_data.py" "$src/data/darcy" "$work" || { echo "FAIL: making the data"; exit 1; }
"$python" - "$src/data/darcy/darcy_test_32.pt" "$work/test32.h5" << 'EOF' || { echo "FAIL: test32.h5"; exit 1; }
import sys, torch, h5py
d = torch.load(sys.argv[1])
with h5py.File(sys.argv[2], "w") as f:
    f["coeff"] = d["x"][:12].float().numpy()
    f["sol"] = d["y"][:12].float().numpy()
EOF

# Three tiny runs: 2D (per-channel normalizers), 2D pointwise, 3D.
trained() {
  local name=$1; shift
  "$train" --out "$work/$name" --set device.name=cpu --set output.progress=none \
    --set offload.plan_cache=none "$@" > "$work/$name.log" 2>&1 ||
    { bad "fno_train $name: $(tail -3 "$work/$name.log")"; finish; exit 1; }
}
cat > "$work/tiny.yaml" << EOF
model: {n_modes: [8, 8], hidden_channels: 8, n_layers: 2}
data: {train_file: $work/train16.h5, n_train: 32, batch_size: 8, test: []}
optimizer: {lr: 8.0e-3}
training: {epochs: 1}
EOF
cat > "$work/cube.yaml" << EOF
model: {n_modes: [6, 6, 4], hidden_channels: 6, n_layers: 2}
data: {train_file: $work/cube.h5, n_train: 16, batch_size: 4, test: []}
optimizer: {lr: 8.0e-3}
training: {epochs: 1}
EOF
trained run2d --config "$work/tiny.yaml"
trained runpw --config "$work/tiny.yaml" --set data.normalization=pointwise
trained run3d --config "$work/cube.yaml"

common=(--device "$device" --progress none)
# one NAME ARGS...: one process.
one() {
  local name=$1; shift
  "$bin" "${common[@]}" --out "$work/$name.h5" "$@" > "$work/$name.out" 2> "$work/$name.err" ||
    bad "one process $name: $(tail -3 "$work/$name.err")"
}
# ranks NAME N PORT ARGS...: N ranks under torchrun.
ranks() {
  local name=$1 n=$2 p=$3; shift 3
  "$python" -m torch.distributed.run --no-python --nproc-per-node "$n" --master-port "$(port "$p")" \
    "$bin" "${common[@]}" --out "$work/$name.h5" "$@" > "$work/$name.out" 2> "$work/$name.err"
}
# check NAME BASELINE RC: the run exited 0; compared with the baseline at the end.
pairs=()
check() { check_run "$1" "$2" "$3" .h5; }

# 1. Two ranks, HDF5 at 32 x 32 with the truth; and tiles of 4 rows in each band.
in32=(--model "$work/run2d" --input "$work/test32.h5" --y-key sol --batch-size 4)
one one32 "${in32[@]}"
ranks two32 2 1 "${in32[@]}" --domain-parallel 2
check two32 one32 $?
grep -q "domain parallel 2 (bands of 16 rows, 1 sample group(s))" "$work/two32.err" && ok ||
  bad "no domain plan line: $(grep plan "$work/two32.err")"
[ "$(grep -c '^mean_l2' "$work/two32.out")" -eq 1 ] && ok || bad "not one rank printed the means"
ranks two32t 2 2 "${in32[@]}" --domain-parallel 2 --tile-rows 4
check two32t one32 $?

# 2. Three ranks on 16 rows (6, 5, 5), a .pt input, pointwise normalizers.
in16=(--model "$work/runpw" --input "$src/data/darcy/darcy_test_16.pt" --y-key y --samples 0:10)
one one16 "${in16[@]}"
ranks three16 3 3 "${in16[@]}" --domain-parallel 3
check three16 one16 $?

# 3. Four ranks: two sample groups of two bands (7 samples: 4 and 3); without the truth.
in7=(--model "$work/run2d" --input "$work/test32.h5" --samples 2:7 --batch-size 2)
one one7 "${in7[@]}" --y-key sol
ranks four7 4 4 "${in7[@]}" --y-key sol --domain-parallel 2
check four7 one7 $?
ranks dp7 2 13 "${in7[@]}" --y-key sol --domain-parallel 1
check dp7 one7 $?
one one7x "${in7[@]}"
ranks four7x 4 5 "${in7[@]}" --domain-parallel 2
check four7x one7x $?
[ ! -e "$work/four7x.summary.json" ] && ok || bad "a summary without the truth"

# 4. A 3D model.
in3=(--model "$work/run3d" --input "$work/cube.h5" --y-key sol --samples 0:6)
one one3d "${in3[@]}"
ranks two3d 2 6 "${in3[@]}" --domain-parallel 2
check two3d one3d $?

# 4b. Navier-Stokes: a space-time run and a recurrent one on ns16.h5's records
#    (16 x 16, 8 records: 4 in, 4 out), 7 samples with the truth.
cat > "$work/ns.yaml" << EOF
model: {n_modes: [6, 6, 4], in_channels: 4, out_channels: 1, hidden_channels: 6, n_layers: 2}
data:
  problem: ns
  ns_mode: space_time
  t_in: 4
  t_out: 4
  train_file: $work/ns16.h5
  n_train: 8
  batch_size: 4
  encode_input: true
  encode_output: true
  test: []
optimizer: {lr: 8.0e-3}
training: {epochs: 1}
EOF
trained runst --config "$work/ns.yaml"
trained runrec --config "$work/ns.yaml" --set data.ns_mode=recurrent --set 'model.n_modes=[6, 6]' \
  --set data.encode_input=false --set data.encode_output=false --set 'training.eval_losses=[l2]'
ns_in=(--input "$work/ns16.h5" --y-key u --samples 9:7 --batch-size 2)
one runst_one --model "$work/runst" "${ns_in[@]}"
ranks runst_two 2 14 --model "$work/runst" "${ns_in[@]}" --domain-parallel 2
check runst_two runst_one $?
ranks runst_three 3 15 --model "$work/runst" "${ns_in[@]}" --domain-parallel 3
check runst_three runst_one $?
one runrec_one --model "$work/runrec" "${ns_in[@]}"
ranks runrec_two 2 16 --model "$work/runrec" "${ns_in[@]}" --domain-parallel 2
check runrec_two runrec_one $?
ranks runrec_three 3 17 --model "$work/runrec" "${ns_in[@]}" --domain-parallel 3
check runrec_three runrec_one $?
grep -q "domain parallel 3 (bands of 5-6 rows, 1 sample group(s))" "$work/runrec_three.err" && ok ||
  bad "runrec_three: no domain plan line: $(grep plan "$work/runrec_three.err")"
# Two sample groups of two bands (7 samples: 4 and 3); without the truth.
ranks runrec_four 4 18 --model "$work/runrec" "${ns_in[@]}" --domain-parallel 2
check runrec_four runrec_one $?
one runst_onex --model "$work/runst" --input "$work/ns16.h5" --samples 0:5
ranks runst_twox 2 19 --model "$work/runst" --input "$work/ns16.h5" --samples 0:5 --domain-parallel 2
check runst_twox runst_onex $?
# Two --input files as one set of samples (12 .. 19 over both).
two_in=(--input "$work/ns16.h5" --input "$work/ns16.h5" --y-key u --samples 12:8 --batch-size 4)
one runrec_onef --model "$work/runrec" "${two_in[@]}"
ranks runrec_threef 3 24 --model "$work/runrec" "${two_in[@]}" --domain-parallel 3
check runrec_threef runrec_onef $?
# data.subsample 2 (8 x 8, per-channel normalizers): the records loaded whole,
# each rank's rows cut from them.
cp -r "$work/runst" "$work/runst_sub"
sed -i 's/^\( *subsample:\).*/\1 2/' "$work/runst_sub/config.yaml"
one runsub_one --model "$work/runst_sub" "${ns_in[@]}"
ranks runsub_two 2 20 --model "$work/runst_sub" "${ns_in[@]}" --domain-parallel 2
check runsub_two runsub_one $?
grep -q "sample(s) at 8x8x4: domain parallel 2" "$work/runsub_two.err" && ok ||
  bad "runsub_two: not at 8x8x4: $(grep plan "$work/runsub_two.err")"

# 4c. Benchmark runs (data.format well) on The Well's layout at 8 x 8: per-field
#     statistics by 2 ranks (bands of 4, 4) and pointwise ones by 3 (3, 3, 2),
#     one step and --rollout, and a range of windows: pred, rollout, the VRMSE
#     per window and the summary's metric per field equal one process's, also
#     written over an output of other windows (--overwrite); 4 ranks as two
#     sample groups of 2 ranks (4 windows and 1 trajectory each), and 3 ranks
#     as three groups of one (windows 3, 3, 2; trajectories 1, 1, 0), equal
#     too.
make_well_set "$work/well" "$work/well.yaml" || bad "making the Well set"
trained runwell --config "$work/well.yaml"
trained runwellpw --config "$work/well.yaml" --set data.normalization=pointwise --set data.encode_output=true
wl=(--input "$work/well" --rollout --batch-size 3)
one well_one --model "$work/runwell" "${wl[@]}"
ranks well_two 2 30 --model "$work/runwell" "${wl[@]}" --domain-parallel 2
check well_two well_one $?
one wellpw_one --model "$work/runwellpw" "${wl[@]}"
ranks wellpw_three 3 31 --model "$work/runwellpw" "${wl[@]}" --domain-parallel 3
check wellpw_three wellpw_one $?
grep -q "window(s) of well split 'valid' at 8x8: domain parallel 3" "$work/wellpw_three.err" && ok ||
  bad "wellpw_three: plan not said: $(grep plan "$work/wellpw_three.err")"
one wells_one --model "$work/runwell" --input "$work/well" --samples 2:5
ranks wells_two 2 32 --model "$work/runwell" --input "$work/well" --samples 2:5 --domain-parallel 2
check wells_two wells_one $?
# --overwrite: the ranks' rows of the rollout replace an output of other windows (made whole
# beside it, then renamed over it).
ranks wello_two 2 34 --model "$work/runwell" --input "$work/well" --samples 2:5 --domain-parallel 2
ranks wello_two 2 35 --model "$work/runwell" "${wl[@]}" --domain-parallel 2 --overwrite
check wello_two well_one $?
ls "$work"/wello_two.h5.replacing.* > /dev/null 2>&1 && bad "wello_two: a .replacing file left" || ok
ranks well_four 4 33 --model "$work/runwell" "${wl[@]}" --domain-parallel 2
check well_four well_one $?
grep -q "domain parallel 2 (2 sample groups)" "$work/well_four.err" && ok ||
  bad "well_four: plan not said: $(grep plan "$work/well_four.err")"
ranks well_three_groups 3 36 --model "$work/runwell" "${wl[@]}" --domain-parallel 1
check well_three_groups well_one $?

# 5. Refusals: one line, exit 2. Those before the rendezvous, of one rank
#    alone; those after it, of both ranks (started by hand: torchrun stops the
#    other ranks as soon as one exits).
alone() {
  local pattern=$1; shift
  MASTER_PORT=$(port 7) WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 expect 2 "$pattern" -- "${common[@]}" "$@"
}
alone "--domain-parallel 3 does not divide the world size 2" "${in32[@]}" --out "$work/x.h5" --domain-parallel 3
alone "under torchrun (WORLD_SIZE 2), give --domain-parallel N" "${in32[@]}" --out "$work/x.h5"
alone "--cuda-graphs on: --domain-parallel 2 runs each band eagerly" "${in32[@]}" --out "$work/x.h5" \
  --domain-parallel 2 --cuda-graphs on
alone "--rollout: --domain-parallel 2 predicts" "${in32[@]}" --out "$work/x.h5" --domain-parallel 2 --rollout
[ ! -e "$work/x.h5" ] && ok || bad "a refusal left x.h5"
# Not under torchrun.
expect 2 "--domain-parallel 2 does not divide the world size 1" -- \
  "${common[@]}" "${in32[@]}" --out "$work/alone.h5" --domain-parallel 2
# pair NAME PORT PATTERN ARGS...: ranks 0 and 1 each exit 2 (PAIR_CODE) with one
# line matching PATTERN.
pair() {
  local name=$1 p=$2 pattern=$3 want=${PAIR_CODE:-2} r rc; shift 3
  for r in 0 1; do
    MASTER_PORT=$(port "$p") WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r "$bin" "${common[@]}" \
      --out "$work/$name.h5" "$@" > "$work/$name.$r.out" 2> "$work/$name.$r.err" &
  done
  for r in 0 1; do
    wait -n
    rc=$?
    [ "$rc" -eq "$want" ] || bad "$name: a rank exited $rc, expected $want"
  done
  for r in 0 1; do
    if [ "$(wc -l < "$work/$name.$r.err")" -eq 1 ] && grep -q -- "$pattern" "$work/$name.$r.err"; then ok; else
      bad "$name: rank $r said: $(cat "$work/$name.$r.err")"
    fi
  done
}
pair thinband 8 "bands of 8 rows, thinner than a tile of 12 rows" \
  --model "$work/run2d" --input "$work/train16.h5" --domain-parallel 2 --tile-rows 12
[ ! -e "$work/thinband.h5" ] && ok || bad "thinband left its output"
pair nsthin 21 "bands of 8 rows, thinner than a tile of 12 rows" \
  --model "$work/runst" "${ns_in[@]}" --domain-parallel 2 --tile-rows 12
[ ! -e "$work/nsthin.h5" ] && ok || bad "nsthin left its output"
pair nsrange 22 "ns16.h5: --samples 14:5 asks past the 16 samples it holds" \
  --model "$work/runrec" --input "$work/ns16.h5" --samples 14:5 --domain-parallel 2
PAIR_CODE=3 pair nsrank 23 "train16.h5: dataset 'coeff' has rank 3, expected (N, R, R, T) records" \
  --model "$work/runst" --input "$work/train16.h5" --x-key coeff --domain-parallel 2

# 6. An existing --out is left as it was (every rank refuses it); --overwrite
#    replaces fno_predict's own.
echo "not fno_predict's" > "$work/keep.h5"
pair keep 9 "keep.h5 exists; choose another --out or pass --overwrite" "${in32[@]}" --domain-parallel 2
[ "$(cat "$work/keep.h5")" = "not fno_predict's" ] && ok || bad "keep.h5 was touched"
cp "$work/one7.h5" "$work/again.h5"
ranks again 2 12 "${in32[@]}" --domain-parallel 2 --overwrite
check again one32 $?
[ -z "$(find "$work" -name '*.tmp.*' -o -name '*.replacing.*')" ] && ok ||
  bad "temporary files left: $(find "$work" -name '*.tmp.*' -o -name '*.replacing.*')"

# 7. --timeout: a rank whose peer never starts stops within it, in one line
#    naming the rendezvous, with a non-zero exit and no output.
t0=$(date +%s)
MASTER_PORT=$(port 13) WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 "$bin" "${common[@]}" "${in32[@]}" \
  --out "$work/lone.h5" --domain-parallel 2 --timeout 3 > "$work/lone.out" 2> "$work/lone.err"
rc=$? secs=$(($(date +%s) - t0))
if [ "$rc" -ne 0 ] && [ "$secs" -lt 30 ] && [ "$(wc -l < "$work/lone.err")" -eq 1 ] &&
  grep -q "^fno_predict: rank 0: rendezvous at .* failed (do all 2 ranks run?)" "$work/lone.err" &&
  [ ! -e "$work/lone.h5" ]; then ok; else
  bad "a lone rank with --timeout 3: exit $rc after $secs s: $(cat "$work/lone.err")"
fi

# The equalities.
compare_pairs "$work/compare.txt" predict_domain_compare.py "${pairs[@]}"
[ "$(grep -cE '^(ok|differ) ' "$work/compare.txt")" -eq $((${#pairs[@]} / 2)) ] ||
  bad "predict_domain_compare.py: $(tail -3 "$work/compare.txt")"
cat "$work/compare.txt"

finish test_predict_domain
