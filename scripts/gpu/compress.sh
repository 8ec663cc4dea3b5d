#!/usr/bin/env bash
# compress: the Darcy seed run, every activation offloaded: lossless vs bf16
# Run on the GPU machine from the repository root: scripts/gpu.sh compress (several suites
# in one call: scripts/gpu.sh compress OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" compress
for c in none bf16; do
  "$build/apps/fno_train" --config configs/darcy.yaml --out "$out/seed_compress_$c" \
    --offload all --set offload.min_bytes=0 --set offload.compress=$c \
    --set output.progress=none > "$out/seed_compress_$c.log" 2>&1
  say "compress $c: exit $? $(tail -1 "$out/seed_compress_$c/metrics.jsonl" | cut -c1-300)"
done
