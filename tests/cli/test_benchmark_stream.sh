#!/usr/bin/env bash
# A benchmark set larger than the host budget streams (issue 53): a set in The
# Well's layout made here (bench/make_well_set.py) trains end to end with its
# windows read from the files batch by batch (data.stream auto under a small
# data.host_memory_limit, which says so in one line), and reaches the metrics
# of the run that keeps the windows in memory (the same batches) to 1e-6. Peak
# RSS: the streamed run stays under the process's floor (the same run on one
# trajectory) plus the limit and 16 MiB of run-to-run noise; the resident run
# does not. Under a real address
# space limit (prlimit --as: the floor's plus what the limit allows) the
# streamed run trains and the resident one stops with one line.
#   test_benchmark_stream.sh FNO_TRAIN SOURCE_DIR WORK_DIR PYTHON
set -u
bin=$1 src=$2 work=$3 py=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$py" -c 'import h5py, numpy' 2> /dev/null || { echo "skipped: $py lacks h5py"; exit 77; }

# 24 trajectories of 24 steps of 8 fields on 32 x 32: 18 MiB of files; with
# history 4, 480 windows of 160 KiB: 75 MiB in memory.
"$py" "$src/bench/make_well_set.py" "$work/set" --grid 32 32 --steps 24 --fields 8 \
  --trajectories 12 --shards 2 --splits train valid || { bad "make_well_set.py"; finish; exit 1; }
limit_mib=16
cat > "$work/cfg.yaml" << YAML
model: {n_modes: [4, 4], hidden_channels: 8, n_layers: 2, in_channels: 32, out_channels: 8}
data:
  format: well
  train_file: $work/set
  history: 4
  horizon: 1
  n_train: -1
  batch_size: 16
  encode_input: true
  host_memory_limit: ${limit_mib}MiB
  test:
    - {file: $work/set, split: valid, name: valid, n_samples: 1}
training: {epochs: 2, loss: l2, eval_losses: [l2], seed: 3}
device: {name: cpu}
output: {progress: none}
YAML
# (Few malloc arenas: the address space a thread's arena reserves does not vary.)
export MALLOC_ARENA_MAX=2

# A run's peak RSS and peak address space (VmPeak, read while it runs) in
# bytes, and its exit code; its stderr in OUT_FILE.err.
measure() {  # OUT_FILE ARGS...
  "$py" - "$@" << 'PY'
import resource, subprocess, sys, time
with open(sys.argv[1] + ".err", "w") as err:
    p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err)
    vm = 0
    while p.poll() is None:
        try:
            for line in open(f"/proc/{p.pid}/status"):
                if line.startswith("VmPeak:"):
                    vm = max(vm, int(line.split()[1]) * 1024)
        except OSError:
            pass
        time.sleep(0.01)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
open(sys.argv[1], "w").write(f"{rss} {vm} {p.returncode}\n")
PY
}
run() {  # NAME SETTINGS...
  local name=$1; shift
  measure "$work/$name.m" "$bin" --config "$work/cfg.yaml" --out "$work/$name" "${@/#/--set=}"
  read -r "${name}_rss" "${name}_vm" "${name}_rc" < "$work/$name.m"
}
run resident data.stream=off
run streamed  # auto: 75 MiB of windows, more than 16 MiB
run floor data.stream=on data.n_train=1
run pointwise_resident data.stream=off data.normalization=pointwise training.epochs=1
run pointwise_streamed data.stream=on data.normalization=pointwise training.epochs=1
for name in resident streamed floor pointwise_resident pointwise_streamed; do
  rc=${name}_rc
  [ "${!rc}" -eq 0 ] && ok || bad "$name: exit ${!rc}: $(tail -2 "$work/$name.m.err")"
done
grep -q "^fno_train: data.stream auto: the training split's 480 windows take .* more than data.host_memory_limit .*; streaming them from the files$" \
  "$work/streamed.m.err" && ok || bad "streamed: no line saying it streams: $(cat "$work/streamed.m.err")"
grep -q "streaming them" "$work/resident.m.err" && bad "resident: $(cat "$work/resident.m.err")" || ok
grep -q '"data_wait_s": ' "$work/streamed/metrics.jsonl" && ok || bad "streamed: metrics.jsonl lacks data_wait_s"

# The same batches: the same losses and metrics, epoch by epoch, and at the end.
same() {  # A B TOLERANCE
  "$py" - "$work/$1" "$work/$2" "$3" << 'PY'
import json, sys
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
la = [json.loads(l) for l in open(a + "/metrics.jsonl")]
lb = [json.loads(l) for l in open(b + "/metrics.jsonl")]
sa = json.load(open(a + "/summary.json"))["metrics"]
sb = json.load(open(b + "/summary.json"))["metrics"]
pairs = [(f"epoch {x['epoch']} {k}", x[k], y[k]) for x, y in zip(la, lb) for k in x
         if k in ("train_loss", "valid_l2")]
pairs += [(k, v, sb[k]) for k, v in sa.items()]
bad = [f"{k}: {x} vs {y}" for k, x, y in pairs if abs(x - y) > tol * max(abs(x), abs(y), 1e-30)]
if len(la) != len(lb) or len(pairs) < 2 * len(la) + 2 or bad:
    sys.exit(f"{len(la)} and {len(lb)} epochs, {len(pairs)} values; differ: {bad}")
PY
}
same resident streamed 1e-6 && ok || bad "streamed metrics differ from the resident run's"
same pointwise_resident pointwise_streamed 1e-5 && ok || bad "pointwise: streamed metrics differ"

# Peak RSS: the streamed run within the floor plus the limit; the resident run beyond it.
# (One process's peak RSS varies between runs by itself: on the CI machine the floor measured
# 511 to 531 MiB and the streamed run 521 to 537 MiB over nine runs, three of them beside
# another test, and 513 to 526 and 514 to 532 MiB in four earlier ones. The check allows
# 32 MiB besides the limit; the resident run measured 634 MiB each time, over 100 MiB above
# the floor.)
noise_mib=32
mib() { echo $(($1 / 1048576)); }
budget=$((floor_rss + (limit_mib + noise_mib) * 1048576))
[ "$streamed_rss" -le "$budget" ] && ok ||
  bad "streamed peak RSS $(mib "$streamed_rss") MiB > floor $(mib "$floor_rss") + $limit_mib + $noise_mib MiB"
[ "$resident_rss" -gt "$budget" ] && ok ||
  bad "resident peak RSS $(mib "$resident_rss") MiB <= floor $(mib "$floor_rss") + $limit_mib + $noise_mib MiB: the test does not tell"
echo "peak RSS: floor $(mib "$floor_rss") MiB, streamed $(mib "$streamed_rss") MiB, resident $(mib "$resident_rss") MiB"

# Under a real limit (RLIMIT_AS): the floor's address space plus the limit.
as_limit=$((floor_vm + limit_mib * 1048576))
echo "address space: floor $(mib "$floor_vm") MiB, limit $(mib "$as_limit") MiB"
if prlimit --as="$as_limit" "$bin" --config "$work/cfg.yaml" --out "$work/as_streamed" \
     --set data.stream=on --set training.epochs=1 > /dev/null 2> "$work/as_streamed.err"; then
  ok
else
  bad "streamed under prlimit --as $(mib "$as_limit") MiB: exit $?: $(tail -1 "$work/as_streamed.err")"
fi
prlimit --as="$as_limit" "$bin" --config "$work/cfg.yaml" --out "$work/as_resident" \
  --set data.stream=off > /dev/null 2> "$work/as_resident.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l < "$work/as_resident.err")" -eq 1 ] &&
   grep -q "can't allocate memory" "$work/as_resident.err"; then
  ok
else
  bad "resident under prlimit --as: exit $rc, expected one line saying it cannot allocate: $(cat "$work/as_resident.err")"
fi
finish benchmark_stream
