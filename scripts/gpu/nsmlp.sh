#!/usr/bin/env bash
# nsmlp: issue 27: width-20 blocks' channel MLPs and 128-wide projections on the fused kernels:
#   their GPU tests (and the channel-MLP test's small grids under memcheck and racecheck), then
#   fno_bench none (graphs on, fp32) on configs/ns_v1e-5_fno{3d,2d}.yaml with FNO_FUSED_MLP=0
#   and 1, interleaved twice
# Run on the GPU machine from the repository root: scripts/gpu.sh nsmlp (several suites
# in one call: scripts/gpu.sh nsmlp OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsmlp
# issue 27: width-20 blocks' channel MLPs on the fused channel-MLP kernels (FNO_FUSED_MLP=1)
# against the LibTorch path (0): the GPU tests, then each NS model's step, interleaved twice
mkdir -p "$out/nsmlp"
timeout 300 "$build/tests/fno_gpu_tests" -tc='*width 20*,*channel MLP*' \
  > "$out/nsmlp/gpu_tests.log" 2>&1
say "nsmlp tests: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
  "$out/nsmlp/gpu_tests.log" | tr -s ' ' | tr '\n' ' '))"
local m b r v
mlp_sanitizers "$out/nsmlp"
for r in a b; do
  for m in fno3d:10 fno2d:20; do
    b=${m#*:}
    m=${m%:*}
    for v in 0 1; do
      FNO_FUSED_MLP=$v timeout 120 "$bench" --config "configs/ns_v1e-5_$m.yaml" --resolutions 64 \
        --batches "$b" --policies none --cuda-graphs on --warmup 5 --steps 20 \
        --json "$out/nsmlp/${m}_mlp${v}_$r.json" > /dev/null 2> "$out/nsmlp/${m}_mlp${v}_$r.log"
      say "== ns $m b$b FNO_FUSED_MLP=$v ($r): exit $? $(grep '^fno_bench: ' "$out/nsmlp/${m}_mlp${v}_$r.log" | cut -c1-160)"
    done
  done
done
