#!/usr/bin/env bash
# Domain parallel on one host of 4 GPUs: each sample's rows split over the
# ranks (fno_bench --domain-parallel, docs/domain_parallel.md), against one
# GPU's fastest plan (policy auto, no memory cap) in the same call.
#
#   bench/domain_parallel_study.sh OUT [ROW ...]
#
# Rows (default: all, in this order; rows that would start after BUDGET_S are
# skipped, so split them over calls where one call has less time):
#   strong8k   8192^2 B=1 fp32: 1 GPU (auto), 2 GPUs, 4 GPUs
#   weak       8192^2 per GPU: 8192^2 on 1 GPU (strong8k's), 16384^2 fp32 on 4 GPUs
#   strong16k  16384^2 B=1 bf16: 1 GPU (auto), 4 GPUs
#   largest    32768^2 B=1 bf16 on 4 GPUs, then on 1 GPU of the same host (auto; it may
#              not fit: its status says what stopped it)
#   3d         512^3 B=1 fp32 (configs/poisson3d.yaml's model): 1 GPU (auto), 4 GPUs
#
# Each fno_bench call writes OUT/ROW_NGPU.{json,csv,log}; OUT/summary.txt has
# one line a row (step times, speed-ups, weak-scaling efficiency, the bytes
# each rank sends a step) and OUT/summary.json the same figures.
#
# Environment:
#   FNO_BUILD_DIR=build   where apps/fno_bench is
#   STEPS=3 WARMUP=1      timed (median) and untimed steps of each row
#   ROW_TIMEOUT=240       seconds one fno_bench call may take
#   BUDGET_S=540          no row starts after this many seconds
#   PYTHON=python3        torch.distributed.run (torchrun) and the summary
# NCCL_NVLS_ENABLE=0 (NVLink multicast off) unless set.
set -uo pipefail

usage="usage: bench/domain_parallel_study.sh OUT [strong8k weak strong16k 3d largest]"
out=${1:?$usage}
shift
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(strong8k weak strong16k 3d largest)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FNO_BUILD_DIR:-$root/build}
bench=$build/apps/fno_bench
steps=${STEPS:-3} warmup=${WARMUP:-1}
row_timeout=${ROW_TIMEOUT:-240} budget_s=${BUDGET_S:-540}
python=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
fail() { echo "domain_parallel_study: $*" >&2; exit 2; }
[ -x "$bench" ] || fail "$bench is missing (build fno_bench, or set FNO_BUILD_DIR)"
for r in "${rows[@]}"; do
  case $r in strong8k | strong16k | weak | largest | 3d) ;; *) fail "unknown row '$r' ($usage)" ;; esac
done
gpus=$(nvidia-smi -L 2> /dev/null | wc -l)
mkdir -p "$out" || exit 3
out=$(cd "$out" && pwd)
plans=$out/plans # auto's plans: the one-GPU baseline searches once per grid
mkdir -p "$plans"
start=$SECONDS

# run NAME NGPU ARGS...: one fno_bench call (under torchrun with NGPU > 1).
run() {
  local name=$1 n=$2
  shift 2
  if ((SECONDS - start > budget_s)); then
    echo "$name: skipped (the study's $budget_s s are spent)" | tee "$out/$name.log"
    return
  fi
  if ((n > gpus)); then
    echo "$name: skipped ($n GPUs wanted, $gpus visible)" | tee "$out/$name.log"
    return
  fi
  local cmd=("$bench")
  if ((n > 1)); then
    cmd=("$python" -m torch.distributed.run --standalone --nproc-per-node "$n" --no-python "$bench")
  fi
  echo "== $name: ${cmd[*]} $*" >&2
  timeout -k 10 "$row_timeout" "${cmd[@]}" --warmup "$warmup" --steps "$steps" --plan-cache "$plans" \
    --json "$out/$name.json" --csv "$out/$name.csv" "$@" > /dev/null 2> "$out/$name.log"
  local rc=$?
  echo "$name: exit $rc ($((SECONDS - start)) s so far)" >&2
  tail -n 3 "$out/$name.log" >&2
}

for r in "${rows[@]}"; do
  case $r in
    strong8k)
      run strong8k_1 1 --resolutions 8192 --batches 1 --precision fp32 --policies auto
      run strong8k_2 2 --resolutions 8192 --batches 1 --precision fp32 --domain-parallel 2 \
        --one-gpu-baseline 0
      run strong8k_4 4 --resolutions 8192 --batches 1 --precision fp32 --domain-parallel 4 \
        --one-gpu-baseline 0
      ;;
    strong16k)
      run strong16k_1 1 --resolutions 16384 --batches 1 --precision bf16 --policies auto
      run strong16k_4 4 --resolutions 16384 --batches 1 --precision bf16 --domain-parallel 4 \
        --one-gpu-baseline 0
      ;;
    weak)
      [ -f "$out/strong8k_1.json" ] ||
        run strong8k_1 1 --resolutions 8192 --batches 1 --precision fp32 --policies auto
      run weak16k_4 4 --resolutions 16384 --batches 1 --precision fp32 --domain-parallel 4 \
        --one-gpu-baseline 0
      ;;
    largest)
      # "Trains": 10 steps on 4 GPUs (1 warm-up, 9 timed) with a finite loss
      # that decreases; 2 timed steps on one GPU (several seconds each).
      steps=9
      run largest32k_4 4 --resolutions 32768 --batches 1 --precision bf16 --domain-parallel 4 \
        --one-gpu-baseline 0
      steps=2
      run largest32k_1 1 --resolutions 32768 --batches 1 --precision bf16 --policies auto
      steps=${STEPS:-3}
      ;;
    3d)
      run 3d512_1 1 --config "$root/configs/poisson3d.yaml" --resolutions 512 --batches 1 \
        --precision fp32 --policies auto
      steps=9  # "trains": 10 steps (1 warm-up), the loss of each reported
      run 3d512_4 4 --config "$root/configs/poisson3d.yaml" --resolutions 512 --batches 1 \
        --precision fp32 --domain-parallel 4 --one-gpu-baseline 0
      steps=${STEPS:-3}
      ;;
  esac
done

# The summary: step times against the one-GPU rows of the same call.
"$python" - "$out" << 'EOF'
import json, math, os, sys
out = sys.argv[1]
def row(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            rows = json.load(f)["rows"]
    except (OSError, ValueError, KeyError):
        return None
    return rows[0] if rows else None
def ms(r):
    return r["ms_per_step"] if r and r.get("status") == "ok" else None
lines, summary = [], {}
def add(key, text, **fig):
    lines.append(text)
    summary[key] = fig
def describe(name):
    r = row(name)
    if r is None:
        return "not run"
    if r["status"] != "ok":
        return r["status"]
    s = "%.1f ms" % r["ms_per_step"]
    if r.get("domain_parallel", 1) > 1:
        s += " (ranks %s ms; each rank sends %.0f KB a step for its band, spectra %.0f KB, gradients %.0f KB)" % (
            "/".join("%.1f" % x for x in r["rank_ms"]), r["domain_bytes_sent"] / 1e3,
            r["spectra_bytes"] / 1e3, r["gradient_bytes_sent"] / 1e3)
        if "domain_sums_per_step" in r:
            s += "; %.0f band sums a step, the host waited for %.1f of them unfinished" % (
                r["domain_sums_per_step"], r["domain_host_waits_per_step"])
        if r.get("plan"):
            # The band's step taken (the whole band with activations kept, or
            # a tiled plan), and each candidate's measured time.
            s += "; plan: " + r["plan"]
    loss = r.get("losses") or []
    if len(loss) > 1:
        s += "; loss over %d steps %.4g -> %.4g (%s)" % (
            len(loss), loss[0], loss[-1],
            "finite, decreasing" if all(map(math.isfinite, loss)) and loss[-1] < loss[0]
            else "NOT finite and decreasing")
    return s
for base, others in [("strong8k_1", ["strong8k_2", "strong8k_4"]), ("strong16k_1", ["strong16k_4"]),
                     ("3d512_1", ["3d512_4"])]:
    b = ms(row(base))
    add(base, "%s: %s" % (base, describe(base)), ms=b)
    for o in others:
        t = ms(row(o))
        sp = b / t if b and t else None
        add(o, "%s: %s; speed-up %s" % (o, describe(o), "%.2fx" % sp if sp else "n/a"), ms=t, speedup=sp)
b, t = ms(row("strong8k_1")), ms(row("weak16k_4"))
eff = b / t if b and t else None
add("weak16k_4", "weak16k_4 (16384^2 on 4 GPUs vs 8192^2 on 1): %s; weak-scaling efficiency %s"
    % (describe("weak16k_4"), "%.1f%%" % (100 * eff) if eff else "n/a"), ms=t, efficiency=eff)
for name in ["largest32k_4", "largest32k_1"]:
    add(name, "%s: %s" % (name, describe(name)), ms=ms(row(name)))
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
for name, data in [("summary.txt", text), ("summary.json", json.dumps(summary, indent=1) + "\n")]:
    tmp = os.path.join(out, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(data)
    os.replace(tmp, os.path.join(out, name))
EOF
