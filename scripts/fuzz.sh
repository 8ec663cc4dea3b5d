#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (default 60) on its growing corpus in
# build-san/tests/fuzz_corpus/, after scripts/sanitize.sh has built them.
#   scripts/fuzz.sh 3600     # an hour each
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FNO_SAN_BUILD_DIR:-$root/build-san}
seconds=${1:-60}
[ -x "$build/tests/fuzz_config" ] || { echo "fuzz.sh: run scripts/sanitize.sh first" >&2; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
for name in torch_file hdf5 config; do
  echo "== fuzz_$name for ${seconds}s"
  mkdir -p "$build/tests/fuzz_corpus/$name"
  "$build/tests/fuzz_$name" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
    -print_final_stats=1 "$build/tests/fuzz_corpus/$name" "$root/tests/fuzz/seeds/$name"
done
