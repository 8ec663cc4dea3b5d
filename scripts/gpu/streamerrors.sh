#!/usr/bin/env bash
# streamerrors: issue 49: fno_predict's errors against the truth while streaming, on the GPU:
#   the golden state dict (tests/golden/seed_state.pt, its settings as --set flags) at 1024^2
#   on 4 fno_datagen samples, in memory and streamed in tiles of 128 rows (the truth read per
#   tile); mean_l2 and mean_h1 must agree to 1e-5 relative; two input files as one set too
# Run on the GPU machine from the repository root: scripts/gpu.sh streamerrors. scripts/gpu/lib.sh
# builds first and sets $out ($OUT/results), say and $build.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" streamerrors
mkdir -p "$out/streamerrors"
local d=$out/streamerrors
cmake --build "$build" --target fno_predict fno_datagen > "$d/build.log" 2>&1 ||
  { say "streamerrors: build failed: $(tail -3 "$d/build.log")"; return; }
"$build/apps/fno_datagen" --resolution 1024 --samples 4 --seed 3 --progress none \
  --out "$d/d1024.h5" > "$d/datagen.log" 2>&1 || { say "streamerrors: datagen failed"; return; }
local settings=(--set 'model.n_modes=[16, 16]' --set model.hidden_channels=32
  --set model.projection_channel_ratio=2)
local run
for run in mem:"" stream:"--tile-rows 128" two:"--tile-rows 128 --input $d/d1024.h5"; do
  # shellcheck disable=SC2086  # (the extra flags split on purpose)
  "$build/apps/fno_predict" --model tests/golden/seed_state.pt "${settings[@]}" \
    --input "$d/d1024.h5" ${run#*:} --y-key sol --device cuda --progress none \
    --out "$d/${run%%:*}.h5" --overwrite > "$d/${run%%:*}.log" 2>&1
  say "streamerrors ${run%%:*}: exit $? $(grep -h 'plan:\|mean_' "$d/${run%%:*}.log" | tr '\n' ' ')"
done
local m a b
for m in mean_l2 mean_h1; do
  a=$(grep -o "\"$m\": [-0-9.e+]*" "$d/mem.summary.json" | sed 's/.*: //')
  b=$(grep -o "\"$m\": [-0-9.e+]*" "$d/stream.summary.json" | sed 's/.*: //')
  say "streamerrors $m: in memory $a, streamed $b: $(awk -v a="$a" -v b="$b" 'BEGIN {
    d = a - b; if (d < 0) d = -d; print (a != "" && d <= 1e-5 * (a < 0 ? -a : a)) ? "PASS" : "FAIL" }')"
done
