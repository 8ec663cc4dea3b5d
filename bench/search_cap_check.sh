#!/usr/bin/env bash
# auto's search under its time cap (offload.search_seconds, fno_bench
# --search-seconds; docs/offload.md) on a GPU machine:
#
#   bench/search_cap_check.sh OUT
#
#   1. one GPU, 16384^2 bf16, --search-seconds 20: the search ends by about
#      20 s (plan_seconds), the row runs, and its plan says
#      "search cut at the 20 s cap after N trials" (or, where the whole search
#      fits in 20 s, no cut), and a plan measured: the trials that would end
#      past the cap (those that pin tens of GiB first) are passed over, and
#      a shorter one after them runs;
#   2. the same with --search-seconds 0: no trial; the plan says "estimated,
#      not measured" and "after 0 trials", and the row still runs;
#   3. with 2 or more GPUs: --domain-parallel 2 at 8192^2 with
#      --search-seconds 1: the ranks stop together after a plan or two (each
#      plan's three band steps take about 0.6 s), the rest "not measured
#      (search cut)", and the row runs the fastest measured.
#
# Each call writes OUT/NAME.{json,log}; the checks print one line each and the
# script exits 1 when one fails.
#
# Environment: FNO_BUILD_DIR=build, PYTHON=python3 (torch.distributed.run).
set -uo pipefail

out=${1:?usage: bench/search_cap_check.sh OUT}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=${FNO_BUILD_DIR:-$root/build}/apps/fno_bench
python=${PYTHON:-python3}
mkdir -p "$out"
failed=0

# check NAME PYTHON-EXPRESSION: the expression over the JSON's first row `r`.
check() {
  local name=$1 expr=$2
  if "$python" - "$out/$name.json" "$expr" <<'PY'; then echo "ok: $name"; else echo "FAILED: $name"; failed=1; fi
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
ok = eval(sys.argv[2])
print(f"  status {r['status']}, plan_seconds {r['plan_seconds']:.1f}, plan: {r['plan'][:300]}")
sys.exit(0 if ok else 1)
PY
}

one=(--resolutions 16384 --batches 1 --precision bf16 --policies auto --warmup 1 --steps 3)
"$bench" "${one[@]}" --search-seconds 20 --json "$out/cap20.json" > "$out/cap20.log" 2>&1
check cap20 "r['status'] == 'ok' and r['plan_seconds'] < 40 and \
  ('search cut at the 20 s cap' in r['plan'] or r['plan_seconds'] < 20) and \
  'estimated, not measured' not in r['plan']"
"$bench" "${one[@]}" --search-seconds 0 --json "$out/cap0.json" > "$out/cap0.log" 2>&1
check cap0 "r['status'] == 'ok' and 'estimated, not measured' in r['plan'] and \
  'search cut at the 0 s cap after 0 trials' in r['plan']"

gpus=$(nvidia-smi -L 2> /dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then
  NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} "$python" -m torch.distributed.run --standalone \
    --nproc-per-node 2 --no-python "$bench" --domain-parallel 2 --resolutions 8192 --batches 1 \
    --one-gpu-baseline 0 --warmup 1 --steps 3 --search-seconds 1 --json "$out/domain1.json" \
    > "$out/domain1.log" 2>&1
  check domain1 "r['status'] == 'ok' and 'search cut at the 1 s cap after' in r['plan'] \
    and 'not measured (search cut)' in r['plan']"
else
  echo "skipped: domain1 (needs 2 GPUs, $gpus here)"
fi
exit $failed
