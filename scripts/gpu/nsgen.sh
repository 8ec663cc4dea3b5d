#!/usr/bin/env bash
# nsgen: the Navier-Stokes generator's fused CUDA step against LibTorch's (FNO_NS_FUSED=0 and 1,
#   interleaved twice): 256^2 -> 64^2, float32, 64 samples in a batch of 64, T 1 (10^4 steps);
#   seconds each
# Run on the GPU machine from the repository root: scripts/gpu.sh nsgen (several suites
# in one call: scripts/gpu.sh nsgen OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsgen
# The fused Navier-Stokes step (data/src/cuda/ns_step.cu) against LibTorch's step:
# fno_datagen --problem ns at the paper's settings (nu 1e-3, dt 1e-4, 256^2 solved, 64^2
# stored), float32, 64 samples in one batch of 64, --t-final 1 (10^4 steps), CUDA graphs
# on, with FNO_NS_FUSED=0 and =1 interleaved twice: the solver's seconds (solve_seconds)
# and ms a step of the batch. The numbers' agreement is the GPU test's
# (tests/test_gpu_ns.cpp), so the outputs are not kept.
local d=$out/nsgen rep fused name t1 rc wall solve
mkdir -p "$d"
for rep in 1 2; do
  for fused in 0 1; do
    name=fused${fused}_$rep
    t1=$(date +%s%N)
    FNO_NS_FUSED=$fused timeout 300 "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 \
      --resolution 256 --subsample 4 --dt 1e-4 --t-final 1 --record-every 1 --samples 64 \
      --seed 0 --precision float32 --batch 64 --device cuda --progress none \
      --out "$d/ns_$name.h5" > "$d/ns_$name.log" 2>&1
    rc=$?
    wall=$(awk -v t="$(($(date +%s%N) - t1))" 'BEGIN { printf "%.2f", t / 1e9 }')
    solve=$(sed -n 's/^solve_seconds //p' "$d/ns_$name.log")
    rm -f "$d/ns_$name.h5"
    if [ "$rc" = 0 ] && [ -n "$solve" ]; then
      say "nsgen FNO_NS_FUSED=$fused (run $rep): wall $wall s, solve $solve s," \
        "$(awk -v s="$solve" 'BEGIN { printf "%.3f", s / 1e4 * 1e3 }') ms a step (batch 64)"
    else
      say "nsgen FNO_NS_FUSED=$fused (run $rep): exit $rc after $wall s;" \
        "$(tail -1 "$d/ns_$name.log" | cut -c1-200)"
    fi
  done
done
