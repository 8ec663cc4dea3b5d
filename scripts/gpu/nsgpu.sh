#!/usr/bin/env bash
# nsgpu: Navier-Stokes on CUDA: smoke data and both training modes; the paper's protocol (nu
#   1e-3, T 50) for 16 samples, timed
# Run on the GPU machine from the repository root: scripts/gpu.sh nsgpu (several suites
# in one call: scripts/gpu.sh nsgpu OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsgpu
# Navier-Stokes on CUDA: the smoke configs' data and both training modes (recurrent
# FNO-2D, space-time FNO-3D); then the paper's protocol (nu 1e-3, 256^2 -> 64^2,
# dt 1e-4, T 50) for 16 samples, timed
local d=$out/ns
mkdir -p "$d"
"$build/apps/fno_datagen" --problem ns --viscosity 1e-3 --resolution 16 --dt 1e-2 \
  --t-final 4 --record-every 0.5 --samples 40 --test-samples 8 --seed 0 --device cuda \
  --progress none --out "$d/ns_smoke.h5" > "$d/datagen_smoke.log" 2>&1
say "ns smoke datagen (cuda): exit $?"
for m in fno2d fno3d; do
  timeout 120 "$build/apps/fno_train" --config "configs/ns_smoke_$m.yaml" \
    --set "data.train_file=$d/ns_smoke_train.h5" \
    --set "data.test=[{file: $d/ns_smoke_test.h5, name: ns, batch_size: 8}]" \
    --set device.name=cuda --set output.progress=none --out "$d/smoke_$m" \
    > "$d/smoke_$m.stdout" 2> "$d/smoke_$m.stderr"
  say "ns smoke $m (cuda): exit $? $(tail -1 "$d/smoke_$m.stderr" | cut -c1-150)"
  head -1 "$d/smoke_$m/metrics.jsonl" | cut -c1-200 | tee -a "$summary"
  tail -1 "$d/smoke_$m/metrics.jsonl" | cut -c1-200 | tee -a "$summary"
done
local t0
t0=$(date +%s)
timeout 200 "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 --t-final 50 \
  --resolution 256 --subsample 4 --samples 16 --test-samples 0 --seed 0 --device cuda \
  --progress none --out "$d/ns_v1e-3_T50_16.h5" > "$d/datagen_protocol.log" 2>&1
say "ns protocol datagen (nu 1e-3, T 50, 16 samples, cuda): exit $?," \
  "$(($(date +%s) - t0)) s; $(tail -1 "$d/datagen_protocol.log" | cut -c1-150)"
