#!/usr/bin/env bash
# bench/resolution_study.sh, tiny and on the CPU: two grids (16 and 24), one
# epoch, a few samples, the four runs each (none, auto, auto under 8 and 2 GiB;
# no step part without a GPU). Checks study.csv and study.json, that the offload
# runs (no offload on a CPU) end with exactly the metrics of the run without
# offload, that an out-of-memory run and fno_bench's step cells (ok, out of
# memory, refused, skipped) become data points, and that STUDY_SECONDS skips
# what it has not started.
# Leaves the study in WORK_DIR/study for notebooks/resolutions.ipynb.
#   test_resolution_study.sh SOURCE_DIR BUILD_DIR WORK_DIR [PYTHON]
set -u
src=$1 build=$2 work=$3 python=${4:-python3}
[ -n "$python" ] || python=python3
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
study=$work/study

# One thread per process: spinning OpenMP threads slow small runs down badly on a busy machine.
if OMP_NUM_THREADS=1 N_TRAIN=8 N_TEST=4 BATCH=4 EPOCHS=1 DEVICE=cpu FNO_BUILD_DIR=$build FNO_PYTHON=$python \
   bash "$src/bench/resolution_study.sh" "$study" 16 24 > "$work/study.out" 2> "$work/study.err"; then ok
else bad "the study failed: $(tail -3 "$work/study.err")"; fi
[ -s "$study/study.csv" ] && [ "$(wc -l < "$study/study.csv")" -eq 9 ] && ok || bad "study.csv: not a header and 8 rows"
[ "$(wc -l < "$study/steps.csv")" -eq 1 ] && [ "$(wc -l < "$study/steps.tsv")" -eq 1 ] && ok ||
  bad "steps.csv: step cells without a GPU: $(cat "$study/steps.tsv")"

# check_json PYTHON_CODE: the code gets `s` (study.json) and asserts.
check_json() {
  "$python" - "$study/study.json" "$1" > "$work/check.err" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
exec(sys.argv[2])
EOF
  [ $? -eq 0 ] && ok || bad "study.json: $1: $(tail -2 "$work/check.err")"
}
check_json 'assert [(r["resolution"], r["label"]) for r in s["runs"]] == [(r, l) for r in (16, 24) for l in ("none", "auto", "auto_8GiB", "auto_2GiB")]'
check_json 'assert s["steps"] == [] and s["small_budgets"] == ["8GiB", "2GiB"]'
check_json 'assert all(r["status"] == "ok" and r["exit_code"] == 0 and r["epochs_done"] == 1 for r in s["runs"]), s["runs"]'
check_json 'assert all(r["device"] == "cpu" and r["n_params"] == 1192801 and r["seconds_per_epoch"] > 0 for r in s["runs"])'
check_json 'assert s["small_budget_bytes"] == 8 * 2**30 and [r["budget_bytes"] for r in s["runs"]][:4] == [None, None, 8 * 2**30, 2 * 2**30]'
check_json 'assert (s["epochs"], s["batch"], s["n_train"], s["n_test"]) == (1, 4, 8, 4)'
# Offload moves activations, not arithmetic: at each grid the three runs agree exactly.
check_json 'assert all(0 < r["test_l2"] < 10 and 0 < r["test_h1"] < 10 for r in s["runs"])
for res in (16, 24):
    m = {(r["test_l2"], r["test_h1"], r["train_loss"]) for r in s["runs"] if r["resolution"] == res}
    assert len(m) == 1, (res, m)'
grep -q "offload.policy auto: no CUDA device, so nothing is offloaded" "$study/runs/16_auto/stderr.txt" &&
  ok || bad "16_auto: fno_train did not say that it trains without offload"
for res in 16 24; do
  for label in none auto auto_8GiB auto_2GiB; do
    d=$study/runs/${res}_$label
    [ -s "$d/metrics.jsonl" ] && [ -s "$d/summary.json" ] && [ -s "$d/stderr.txt" ] && ok || bad "$d: run files missing"
    [ ! -e "$d/checkpoint_latest.pt" ] && [ ! -e "$d/model.pt" ] && ok || bad "$d: checkpoints kept"
  done
  [ ! -e "$study/data/$res/darcy_train.h5" ] && [ -s "$study/data/$res/datagen.log" ] && ok || bad "data/$res: the .h5 files were kept or no log"
done

# A run that ran out of memory is a data point: the collector on a made-up
# study of one finished run and one that fno_train stopped with exit 4.
fake=$work/fake
mkdir -p "$fake/runs" && cp -r "$study/runs/16_none" "$fake/runs/16_none" && mkdir -p "$fake/runs/4096_none"
echo "fno_train: CUDA out of memory in a training step on a batch [8, 1, 4096, 4096] (policy none): ..." \
  > "$fake/runs/4096_none/stderr.txt"
printf 'resolution\tlabel\tpolicy\tbudget\trun_dir\texit_code\tdatagen_seconds\n16\tnone\tnone\t\truns/16_none\t0\t0.5\n4096\tnone\tnone\t\truns/4096_none\t4\t9.5\n' \
  > "$fake/runs.tsv"
if "$python" "$src/bench/resolution_study.py" "$fake" > "$work/fake.out" 2>&1 &&
   [ "$(cut -d, -f1,2,6,7,8 "$fake/study.csv" | tail -2 | tr '\n' ' ')" = "16,none,ok,0,0 4096,none,oom,4, " ] &&
   grep -q "CUDA out of memory" "$fake/study.json"; then ok
else bad "an out-of-memory run: $(cat "$work/fake.out") $(cat "$fake/study.csv" 2> /dev/null)"; fi

# fno_bench's cells become data points: a made-up step study of four cells (what
# resolution_study.sh leaves: steps.tsv and fno_bench's JSON and log per cell).
fake2=$work/fake_steps
mkdir -p "$fake2/runs" "$fake2/steps" && cp -r "$study/runs/16_none" "$fake2/runs/16_none"
printf 'resolution\tlabel\tpolicy\tbudget\trun_dir\texit_code\tdatagen_seconds\tskipped\n16\tnone\tnone\t\truns/16_none\t0\t0.5\t\n' \
  > "$fake2/runs.tsv"
printf 'resolution\tlabel\tpolicy\tbudget\tbatch\texit_code\tseconds\tskipped\n%s\n%s\n%s\n%s\n' \
  "8192	auto	auto	free	2	0	40.5	" "8192	none	none		2	0	3.1	" \
  "8192	auto_2GiB	auto	2GiB	2	0	6.0	" "16384	none	none		2			skipped: 8192^2 did not fit" \
  > "$fake2/steps.tsv"
row() {  # STATUS MS PEAK PLAN: one fno_bench JSON row
  printf '{"device": "NVIDIA H100 80GB HBM3", "rows": [{"policy": "x", "status": "%s", "ms_per_step": %s, "peak_allocated_bytes": %s, "peak_reserved_bytes": %s, "estimated_peak_bytes": 0, "bytes_offloaded": 0, "plan_seconds": 7.5, "plan": "%s"}]}\n' "$1" "$2" "$3" "$3" "$4"
}
row ok 1234.5 17179869184 "micro_batches=2; tiled" > "$fake2/steps/8192_auto.json"
row oom 0 0 "" > "$fake2/steps/8192_none.json"
row "over budget: no plan keeps a step within 2.00 GiB" 0 0 "" > "$fake2/steps/8192_auto_2GiB.json"
echo "fno_bench: 8192^2 b2: oom" > "$fake2/steps/8192_none.log"
STUDY_SMALL_BUDGETS="8GiB 2GiB" "$python" "$src/bench/resolution_study.py" "$fake2" > "$work/fake2.out" 2>&1 &&
  [ "$(cut -d, -f1,2,7,9,10 "$fake2/steps.csv" | tail -4 | tr '\n' ' ')" = \
    "8192,auto,ok,1234.5,17179869184 8192,none,oom,, 8192,auto_2GiB,refused,, 16384,none,skipped,, " ] &&
  ok || bad "step cells: $(cat "$work/fake2.out") $(cat "$fake2/steps.csv" 2> /dev/null)"
study=$fake2 check_json 'assert [(c["status"], c["message"][:11]) for c in s["steps"]] == [("ok", ""), ("oom", "fno_bench: "), ("refused", "over budget"), ("skipped", "skipped: 81")] and s["steps"][0]["budget_bytes"] is None and s["steps"][2]["budget_bytes"] == 2 * 2**30 and s["steps"][0]["device"] == "NVIDIA H100 80GB HBM3"'

# STUDY_SECONDS: what has not started when it has passed is skipped, and says so.
OMP_NUM_THREADS=1 N_TRAIN=8 N_TEST=4 BATCH=4 EPOCHS=1 DEVICE=cpu STUDY_SECONDS=1 FNO_BUILD_DIR=$build \
  FNO_PYTHON=$python bash "$src/bench/resolution_study.sh" "$work/timed" 16 24 > /dev/null 2> "$work/timed.err"
study=$work/timed check_json 'assert [r["status"] for r in s["runs"] if r["resolution"] == 24] == ["skipped"] * 4 and all("STUDY_SECONDS" in r["message"] for r in s["runs"] if r["status"] == "skipped")'

# Bad arguments: one line, exit 2, nothing run.
FNO_BUILD_DIR=$build bash "$src/bench/resolution_study.sh" "$work/bad" 16 abc > /dev/null 2> "$work/err"
[ $? -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] && grep -q "resolution 'abc'" "$work/err" && ok || bad "RES abc: $(cat "$work/err")"
SMALL_BUDGET=12XB FNO_BUILD_DIR=$build bash "$src/bench/resolution_study.sh" "$work/bad" 16 > /dev/null 2> "$work/err"
[ $? -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] && grep -q "bad memory size '12XB'" "$work/err" && ok || bad "SMALL_BUDGET=12XB: $(cat "$work/err")"
STEP_RES="128 x" FNO_BUILD_DIR=$build bash "$src/bench/resolution_study.sh" "$work/bad" 16 > /dev/null 2> "$work/err"
[ $? -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] && grep -q "STEP_RES: resolution 'x'" "$work/err" && ok || bad "STEP_RES='128 x': $(cat "$work/err")"
[ ! -e "$work/bad" ] && ok || bad "a refused study made its output folder"

finish "resolution study"
