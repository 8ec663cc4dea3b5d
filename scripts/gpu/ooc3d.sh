#!/usr/bin/env bash
# ooc3d: the 3D FNO (configs/poisson3d.yaml, modes 16^3) at 256^3: none, auto 8 GiB
# Run on the GPU machine from the repository root: scripts/gpu.sh ooc3d (several suites
# in one call: scripts/gpu.sh ooc3d OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: BENCH_STEPS (5)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" ooc3d
# the 3D FNO of configs/poisson3d.yaml with modes 16^3 at 256^3, batch 1
for run in "none" "auto --gpu-memory-limit 8GiB"; do
  local name=${run%% *}
  # shellcheck disable=SC2086
  timeout 400 "$bench" --config configs/poisson3d.yaml --set 'model.n_modes=[16,16,16]' \
    --resolutions 256 --batches 1 --warmup 1 --steps "$steps" --policies $run \
    --json "$out/ooc3d_$name.json" --csv "$out/ooc3d_$name.csv" > /dev/null \
    2> "$out/ooc3d_$name.log"
  say "ooc3d $run: exit $? $(grep '^fno_bench: ' "$out/ooc3d_$name.log" | cut -c1-330)"
done
