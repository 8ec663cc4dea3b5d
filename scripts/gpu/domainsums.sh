#!/usr/bin/env bash
# domainsums: domain parallel with the band sums ordered on the stream: fno_tests' NCCL case (a
#   sample over 2 GPUs equals one process's) and tests/cli/test_domain_nccl.sh (exactness, then a
#   rank killed mid-training: the other exits 5 within 60 s naming it, no hang). About 5 minutes
#   on 2 x H100 after the build. The step times: DOMAIN_ROWS=strong8k scripts/gpu.sh domain.
# Run on the GPU machine (2 GPUs or more) from the repository root: scripts/gpu.sh domainsums.
# scripts/gpu/lib.sh builds first and sets $out ($OUT/results), say, $build and the helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" domainsums
local py
py=$(command -v python3)
if cmake --build "$build" --target fno_tests fno_train > "$out/domainsums_build.log" 2>&1; then
  timeout 300 "$build/tests/fno_tests" -tc="*over 2 GPUs*" -s > "$out/domainsums_unit.log" 2>&1
  say "domainsums: fno_tests' NCCL case: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
    "$out/domainsums_unit.log" | tr '\n' ' '))"
  grep -B2 -A12 'ERROR\|FAILED\|skipped' "$out/domainsums_unit.log" | head -40
else
  say "domainsums: the build failed: $(grep -E 'error|FAILED' "$out/domainsums_build.log" | head -5)"
fi
FNO_PYTHON=$py timeout 480 bash tests/cli/test_domain_nccl.sh "$build" "$PWD" /tmp/fno_domain_nccl "$py" \
  > "$out/domain_nccl.log" 2>&1
say "domainsums: test_domain_nccl: exit $?"
grep -E "^FAIL|^kill rank|equal to|passed" "$out/domain_nccl.log" | tee -a "$summary"
