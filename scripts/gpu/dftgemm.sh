#!/usr/bin/env bash
# dftgemm: issue 28: the last dim's real-DFT GEMM shapes at 64^2/128^2/256^2 (batch 32, 32
#   channels, 9 modes) under cuBLAS and Triton against a copy's floor (bench/dft_gemm_probe.py)
# Run on the GPU machine from the repository root: scripts/gpu.sh dftgemm (several suites
# in one call: scripts/gpu.sh dftgemm OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" dftgemm
mkdir -p "$out/dftgemm"
timeout 300 python3 bench/dft_gemm_probe.py --triton > "$out/dftgemm/probe.jsonl" \
  2> "$out/dftgemm/probe.log"
say "dftgemm: exit $?"
cut -c1-160 "$out/dftgemm/probe.jsonl" | tee -a "$summary"
