#!/usr/bin/env bash
# domainsearch: issue 50's measured plan search of domain parallel on 2 GPUs (or more): fno_bench
#   --domain-parallel 2 under torchrun at 4096^2 and 8192^2, batch 1, fp32: every rank
#   trial-steps the candidate tiled plans of the bands together and takes the fastest by the
#   slowest rank's time; the row's plan names each candidate's measured ms (or why it was
#   dropped); again under --gpu-memory-limit 4GiB, where fewer plans fit every rank
# Run on the GPU machine (2+ GPUs) from the repository root:
#   FNO_TARGETS=fno_bench scripts/gpu.sh domainsearch
# scripts/gpu/lib.sh builds first and sets $out ($OUT/results), say, $bench.
# Environment: SEARCH_GPUS (2).
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" domainsearch
mkdir -p "$out/domainsearch"
local n=${SEARCH_GPUS:-2} name limit
for limit in "" 4GiB; do
  name=search${limit:+_$limit}
  local extra=()
  [ -n "$limit" ] && extra=(--gpu-memory-limit "$limit")
  timeout 500 python3 -m torch.distributed.run --standalone --nproc-per-node "$n" --no-python \
    "$bench" --domain-parallel "$n" --resolutions 4096 8192 --batches 1 --precision fp32 \
    --warmup 1 --steps 3 --one-gpu-baseline 0 "${extra[@]}" \
    --json "$out/domainsearch/$name.json" > "$out/domainsearch/$name.log" 2>&1
  say "fno_bench --domain-parallel $n ${extra[*]}: exit $?"
  grep -h '^fno_bench: ' "$out/domainsearch/$name.log" | grep -o 'domain.*: [a-z]*\|per rank[^;]*' |
    tee -a "$summary"
  python3 - "$out/domainsearch/$name.json" << 'PY' 2> /dev/null | tee -a "$summary"
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(f'  {r["resolution"]}^2: {r["status"]}, {r["ms_per_step"]:.1f} ms/step, '
          f'search {r["plan_seconds"]:.1f} s; plan {r["plan"]}')
PY
done
