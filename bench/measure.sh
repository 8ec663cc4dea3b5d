# Sourced by the bench studies (predict_study.sh, zeroshot_study.sh, predict_throughput.sh).
# measure FILE COMMAND...: runs COMMAND; writes "WALL_S MAX_RSS_BYTES EXIT" to FILE
# (the wall time from start to exit, the command's peak resident set). Uses $py
# (default python3).
# shellcheck shell=bash
measure() {
  "${py:-python3}" - "$@" << 'PY'
import resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.call(sys.argv[2:])
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
open(sys.argv[1], "w").write(f"{wall:.2f} {rss} {rc}\n")
PY
}
