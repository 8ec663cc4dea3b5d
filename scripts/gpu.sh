#!/usr/bin/env bash
# The GPU machine's studies and checks, one script each in scripts/gpu/ (each says at its top
# what it measures and what it reads from the environment), run in one call:
#
#   scripts/gpu.sh SUITE [SUITE ...]   build, then run scripts/gpu/SUITE.sh for each in turn
#   scripts/gpu.sh                     build only (FNO_TARGETS names what to build)
#   scripts/gpu.sh --list              the suites, each with its first line
#
# e.g. scripts/gpu.sh tests memcheck offload1024 neuralop. The build (Release, CUDA kernels on,
# in FNO_BUILD_DIR, default /tmp/fno-gpu-build), $OUT and the helpers the suites share are in
# scripts/gpu/lib.sh. Raw outputs go to $OUT/results/ (packed as $OUT/results.tgz after each
# suite when OUT is set, since only a few files come back from the device machine), what each
# suite says to $OUT/results/summary.txt, and that summary to stdout at the end.
# Environment: FNO_BUILD_DIR, BENCH_STEPS (5), FNO_TARGETS (default: the GPU tests, fno_bench,
# fno_train, fno_datagen, the micro-benchmarks), OUT (/tmp/fno-gpu-out); each suite's own.
here=$(dirname "${BASH_SOURCE[0]}")
case "${1:-}" in
  --list | -h | --help)
    for f in "$here"/gpu/*.sh; do
      [ "$(basename "$f")" = lib.sh ] || sed -n '/^# Run on/q; 2,$s/^#/ /p' "$f"
    done
    exit 0
    ;;
esac
# shellcheck source=scripts/gpu/lib.sh
source "$here/gpu/lib.sh"
for suite in "$@"; do
  t=$(date +%s)
  run_suite "$suite"
  say "[$suite: $(($(date +%s) - t)) s]"
  pack
done
echo "===== summary"
cat "$summary"
