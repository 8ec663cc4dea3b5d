#!/usr/bin/env bash
# small: issue 28's rows: fno_bench none at 64^2/128^2/256^2, batch 32, fp32 and bf16; the seed
#   main command's whole-process wall time
# Run on the GPU machine from the repository root: scripts/gpu.sh small (several suites
# in one call: scripts/gpu.sh small OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" small
# issue 28's rows: fno_bench none at 64^2, 128^2, 256^2 (batch 32, fp32 and bf16, 30
# steps), and the seed main command's whole-process wall time (fno_train, configs/darcy.yaml)
small_bench "$out/small" small
say "small: exit $?"
grep -h '^fno_bench: ' "$out/small/small.log" | cut -c1-200 | tee -a "$summary"
say "seed main command: $(seed_run "$out/small/seed")"
tail -2 "$out/small/seed.log" | cut -c1-300 | tee -a "$summary"
