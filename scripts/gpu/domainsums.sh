#!/usr/bin/env bash
# domainsums: domain parallel with the band sums ordered on the stream (issue 50's 2-GPU row):
#   fno_tests' NCCL case (a sample over 2 GPUs equals one process's), tests/cli/test_domain_nccl.sh
#   (exactness, and a rank killed mid-training: the other exits 5 naming it), then
#   bench/domain_parallel_study.sh strong8k: 8192^2 fp32 on 1 and 2 GPUs (4 where there are):
#   step times, speed-up, the band's sums and host waits per step. About 8 minutes on 2 x H100.
# Run on the GPU machine (2 GPUs or more) from the repository root: scripts/gpu.sh domainsums.
# scripts/gpu/lib.sh builds first and sets $out ($OUT/results), say, $build and the helpers.
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" domainsums
local py
py=$(command -v python3)
if cmake --build "$build" --target fno_tests fno_train fno_bench > "$out/domainsums_build.log" 2>&1; then
  timeout 300 "$build/tests/fno_tests" -tc="*over 2 GPUs*" > "$out/domainsums_unit.log" 2>&1
  say "domainsums: fno_tests' NCCL case: exit $? ($(grep -E '^\[doctest\] (test cases|assertions)' \
    "$out/domainsums_unit.log" | tr '\n' ' '))"
  grep -B2 -A12 'ERROR\|FAILED' "$out/domainsums_unit.log" | head -40
else
  say "domainsums: the build failed: $(grep -E 'error|FAILED' "$out/domainsums_build.log" | head -5)"
fi
FNO_PYTHON=$py timeout 420 bash tests/cli/test_domain_nccl.sh "$build" "$PWD" /tmp/fno_domain_nccl "$py" \
  > "$out/domain_nccl.log" 2>&1
say "domainsums: test_domain_nccl: exit $?"
grep -E "^FAIL|^kill rank|equal to|passed" "$out/domain_nccl.log" | tee -a "$summary"
FNO_BUILD_DIR=$build bench/domain_parallel_study.sh "$out/domainsums" strong8k > "$out/domainsums.log" 2>&1
say "domainsums: strong8k: exit $?"
cat "$out/domainsums/summary.txt" 2> /dev/null | tee -a "$summary"
