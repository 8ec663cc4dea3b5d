#!/usr/bin/env bash
# nsooc: fno_bench on the space-time FNO-3D (configs/ns_v1e-3_fno3d.yaml) at 256^2 x 40, batch
#   4: none, and auto under 4, 8 and 16 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh nsooc (several suites
# in one call: scripts/gpu.sh nsooc OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5), NSOOC_BATCH (4), NSOOC_T, NSOOC_BUDGETS (4 8 16)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsooc
# issue 27 item 5: offload under Navier-Stokes. fno_bench on the space-time FNO-3D of
# configs/ns_v1e-3_fno3d.yaml at 256^2 x T (T its t_out, 40; NSOOC_T overrides), batch
# NSOOC_BATCH (4): none, and auto under NSOOC_BUDGETS GiB (4 8 16); JSON/CSV per run in
# nsooc/ for notebooks/navier_stokes.ipynb (FNO_NB_NSOOC_DIR)
local d=$out/nsooc b=${NSOOC_BATCH:-4} run
local time_args=()
[ -n "${NSOOC_T:-}" ] && time_args=(--time-length "$NSOOC_T")
mkdir -p "$d"
for run in none ${NSOOC_BUDGETS:-4 8 16}; do
  local name=none
  local policy=(--policies none)
  if [ "$run" != none ]; then
    name=auto$run
    policy=(--policies auto --gpu-memory-limit "${run}GiB")
  fi
  timeout 400 "$bench" --config configs/ns_v1e-3_fno3d.yaml "${time_args[@]}" \
    --resolutions 256 --batches "$b" --warmup 1 --steps "$steps" "${policy[@]}" \
    --json "$d/$name.json" --csv "$d/$name.csv" > /dev/null 2> "$d/$name.log"
  say "nsooc $name: exit $? $(grep '^fno_bench: ' "$d/$name.log" | cut -c1-330)"
  grep -h 'over budget\|offload auto: budget' "$d/$name.log" | cut -c1-300 | tee -a "$summary"
done
