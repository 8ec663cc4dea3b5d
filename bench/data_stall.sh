#!/usr/bin/env bash
# The data-stall row (issue 53): on one GPU, next-step training at 512 x 512, batch 32, on a
# synthetic set in The Well's layout (2 fields, 24 steps a trajectory, history 4, horizon 1)
# whose files are in the page cache, once with the windows in memory (data.stream off: on the
# GPU) and once streamed from the files (data.stream on: read by hyperslab on the I/O thread,
# into pinned memory, copied on a side stream). The same batches in the same order; the step
# time of each is the epochs' seconds after the first (no evaluation: no test set) over their
# steps, and the ratio streamed / in memory (the target: at most 1.05).
#
#   bench/data_stall.sh BUILD_DIR [OUT_DIR]
#
# BUILD_DIR holds bin/fno_train (or apps/fno_train). OUT_DIR (default $OUT/data_stall, else
# ./data_stall_out) gets data_stall.json and data_stall.csv (a row a run: its step time, the
# streamed run's data_wait_s and data_read_s per epoch), each run's log, metrics.jsonl and
# summary.json (its directory, with the checkpoints, stays under STALL_DIR/runs).
# Environment: FNO_PYTHON (python3; numpy and h5py write the set), STALL_DIR (where the set
# goes, default /tmp/fno-data-stall; made once and kept for the next call on the same
# machine), STALL_TRAJ (trajectories, 48: 960 windows, 30 batches an epoch, 2.25 GiB of files,
# 9.4 GiB of windows in memory), STALL_EPOCHS (3), STALL_WIDTH (64), STALL_MODES (16),
# STALL_LAYERS (4), STALL_PRECISION (bf16); STALL_GRID (512) and STALL_DEVICE (cuda) to try the
# script small on a CPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:?usage: bench/data_stall.sh BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:+$OUT/data_stall}}
out=${out:-./data_stall_out}
bin=$build/bin/fno_train
[ -x "$bin" ] || bin=$build/apps/fno_train
[ -x "$bin" ] || { echo "data_stall.sh: no fno_train in $build/bin or $build/apps" >&2; exit 2; }
py=${FNO_PYTHON:-python3}
"$py" -c 'import h5py, numpy' 2> /dev/null ||
  { echo "data_stall.sh: $py lacks h5py or numpy (set FNO_PYTHON)" >&2; exit 2; }
set_dir=${STALL_DIR:-/tmp/fno-data-stall}
traj=${STALL_TRAJ:-48} epochs=${STALL_EPOCHS:-3}
mkdir -p "$out"
t0=$(date +%s)
# The set: 3 shards of traj/3 trajectories (kept: a second call on the machine reuses it).
grid=${STALL_GRID:-512}
if [ ! -f "$set_dir/.complete_${traj}_$grid" ]; then
  # Only a set this script made (another size, or cut short) is removed.
  if [ -e "$set_dir" ]; then
    [ -f "$set_dir/.data_stall_set" ] ||
      { echo "data_stall.sh: $set_dir exists and is not a set of this script's; set STALL_DIR" >&2; exit 2; }
    rm -rf "$set_dir"
  fi
  mkdir -p "$set_dir" && touch "$set_dir/.data_stall_set"
  "$py" "$root/bench/make_well_set.py" "$set_dir/set" --grid "$grid" "$grid" --steps 24 --fields 2 \
    --trajectories $((traj / 3)) --shards 3
  touch "$set_dir/.complete_${traj}_$grid"
fi
echo "set: $(du -sh "$set_dir" | cut -f1) in $(($(date +%s) - t0)) s"
# Into the page cache (the machine has more memory than the set).
cat "$set_dir"/set/data/train/*.hdf5 > /dev/null
cat > "$out/data_stall.yaml" << YAML
model:
  n_modes: [${STALL_MODES:-16}, ${STALL_MODES:-16}]
  hidden_channels: ${STALL_WIDTH:-64}
  n_layers: ${STALL_LAYERS:-4}
  in_channels: 8
  out_channels: 2
data:
  format: well
  train_file: $set_dir/set
  history: 4
  horizon: 1
  n_train: -1
  batch_size: 32
  encode_input: true
  test: []
training:
  epochs: $epochs
  precision: ${STALL_PRECISION:-bf16}
  checkpoint_every: 1000
device:
  name: ${STALL_DEVICE:-cuda}
output:
  progress: none
YAML
# The runs' directories (their checkpoints are large) beside the set; their
# metrics.jsonl and summary.json are copied to OUT_DIR/run_MODE/.
runs=$set_dir/runs
for mode in off on; do
  run=$runs/$mode
  rm -rf "$run" "$out/run_$mode"
  t=$(date +%s)
  "$bin" --config "$out/data_stall.yaml" --set data.stream=$mode --out "$run" \
    > "$out/$mode.log" 2>&1 || { echo "data.stream $mode: exit $?"; tail -5 "$out/$mode.log"; exit 1; }
  mkdir -p "$out/run_$mode" && cp "$run/metrics.jsonl" "$run/summary.json" "$out/run_$mode/"
  echo "data.stream $mode: $(($(date +%s) - t)) s"
done
"$py" - "$out" "$epochs" << 'PY'
import json, os, sys
out, epochs = sys.argv[1], int(sys.argv[2])
windows = 20 * int(os.environ.get("STALL_TRAJ", "48"))  # 24 - 4 - 1 + 1 per trajectory
steps = -(-windows // 32)
rows = {}
for mode in ("off", "on"):
    lines = [json.loads(l) for l in open(os.path.join(out, f"run_{mode}", "metrics.jsonl"))]
    later = [l for l in lines if l["epoch"] >= 2]
    row = {"data.stream": mode, "steps_per_epoch": steps,
           "step_ms": 1000 * sum(l["seconds"] for l in later) / (steps * len(later)),
           "epoch_s": [l["seconds"] for l in lines],
           "train_loss": [l["train_loss"] for l in lines]}
    if mode == "on":
        row["data_wait_s"] = [l.get("data_wait_s") for l in lines]
        row["data_read_s"] = [l.get("data_read_s") for l in lines]
    rows[mode] = row
ratio = rows["on"]["step_ms"] / rows["off"]["step_ms"]
grid = int(os.environ.get("STALL_GRID", "512"))
result = {"grid": [grid, grid], "batch": 32, "history": 4, "fields": 2, "windows": windows,
          "resident": rows["off"], "streamed": rows["on"], "ratio": ratio,
          "target": 1.05, "met": ratio <= 1.05,
          # the same batches: the losses agree (to the GPU's nondeterminism)
          "train_loss_max_rel_diff": max(abs(a - b) / max(abs(a), 1e-30) for a, b in
                                         zip(rows["off"]["train_loss"], rows["on"]["train_loss"]))}
tmp = os.path.join(out, "data_stall.json.tmp")
with open(tmp, "w") as f:
    json.dump(result, f, indent=1)
os.replace(tmp, os.path.join(out, "data_stall.json"))
with open(os.path.join(out, "data_stall.csv.tmp"), "w") as f:
    f.write("data.stream,step_ms,epoch_s,data_wait_s,data_read_s\n")
    for mode, r in rows.items():
        f.write(f"{mode},{r['step_ms']:.2f},{' '.join(f'{s:.2f}' for s in r['epoch_s'])},"
                f"{' '.join(f'{s:.3f}' for s in r.get('data_wait_s', []) or [])},"
                f"{' '.join(f'{s:.3f}' for s in r.get('data_read_s', []) or [])}\n")
os.replace(os.path.join(out, "data_stall.csv.tmp"), os.path.join(out, "data_stall.csv"))
print(f"step: in memory {rows['off']['step_ms']:.1f} ms, streamed {rows['on']['step_ms']:.1f} ms, "
      f"ratio {ratio:.3f} (target <= 1.05); streamed waits per epoch {rows['on']['data_wait_s']} s; "
      f"train losses differ by {result['train_loss_max_rel_diff']:.2g} at most")
PY
echo "total: $(($(date +%s) - t0)) s"
