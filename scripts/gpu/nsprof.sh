#!/usr/bin/env bash
# nsprof: the paper's Navier-Stokes models' steps (fno_bench, configs/ns_v1e-5_fno{3d,2d}):
#   graphs on/off, one traced step summed by kernel (issue 27's training time)
# Run on the GPU machine from the repository root: scripts/gpu.sh nsprof (several suites
# in one call: scripts/gpu.sh nsprof OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: NSPROF_BASE_BENCH
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsprof
# issue 27: the paper's Navier-Stokes models' training steps (FNO-3D at 64^2 x 10, batch
# 10; one FNO-2D application at 64^2, batch 20), fp32: fno_bench none with graphs on and
# off (and the FNO-3D with its middle dim by cuFFT, FNO_DFT_MIDDLE_DIM=0), then one traced
# step (graphs off) summed by kernel with the launching ops; first, with NSPROF_BASE_BENCH
# (an fno_bench built from the code before), that one, graphs on
mkdir -p "$out/nsprof"
local m b g
for m in fno3d:10 fno2d:20; do
  b=${m#*:}
  m=${m%:*}
  for g in ${NSPROF_BASE_BENCH:+base} on off mid0; do
    local exe=$bench graphs=$g mid=1
    [ "$g" = base ] && exe=$NSPROF_BASE_BENCH graphs=on
    [ "$g" = mid0 ] && { [ "$m" = fno3d ] || continue; } && graphs=on mid=0
    FNO_DFT_MIDDLE_DIM=$mid timeout 120 "$exe" --config "configs/ns_v1e-5_$m.yaml" --resolutions 64 --batches "$b" \
      --policies none --cuda-graphs $graphs --warmup 5 --steps 20 \
      --json "$out/nsprof/${m}_$g.json" > /dev/null 2> "$out/nsprof/${m}_$g.log"
    say "== ns $m b$b graphs $g: exit $? $(grep '^fno_bench: ' "$out/nsprof/${m}_$g.log" | cut -c1-160)"
  done
  timeout 120 "$bench" --config "configs/ns_v1e-5_$m.yaml" --resolutions 64 --batches "$b" \
    --policies none --cuda-graphs off --warmup 5 --steps 10 \
    --trace "$out/nsprof/$m.json" > /dev/null 2> "$out/nsprof/${m}_trace.log"
  python3 bench/trace_kernels.py "$out/nsprof/$m.json" --top 30 --gaps 3 --ops \
    > "$out/nsprof/${m}_kernels.txt"
  head -45 "$out/nsprof/${m}_kernels.txt" | tee -a "$summary"
  rm -f "$out/nsprof/$m.json"
done
