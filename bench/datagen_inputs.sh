#!/usr/bin/env bash
# Times fno_datagen --inputs-only on a large grid (default 65536 x 65536, one
# sample, 17 GB of float32): the Darcy coefficient drawn row band by row band
# into a dataset chunked by rows, as fno_predict's 65536^2 input. Reports the
# wall time to the renamed file, the host's peak memory, where the time went
# (fno_datagen's draw_seconds, band_seconds, write_seconds, and the rest: the
# fsync and rename), the disk's own write speed for comparison, and checks the
# file (shape, chunks, attribute, values 3 and 12 in a few rows).
#
#   bench/datagen_inputs.sh OUT_DIR [RESOLUTION]
#
# OUT_DIR must hold about 18 GB at 65536. Environment: DEVICE (default cuda),
# SEED (default 0), GRF_MODES (default: fno_datagen's), KEEP=1 keeps the file
# (OUT_DIR/coeff_RES.h5, e.g. for fno_predict), FNO_BUILD_DIR (default build),
# FNO_PYTHON (default python3; h5py for the check, skipped without it).
# Writes OUT_DIR/datagen_inputs_RES.log and prints a summary.
set -uo pipefail

out=${1:?usage: bench/datagen_inputs.sh OUT_DIR [RESOLUTION]}
res=${2:-65536}
build=${FNO_BUILD_DIR:-build}
datagen=$build/apps/fno_datagen
py=${FNO_PYTHON:-python3}
[ -x "$datagen" ] || { echo "datagen_inputs: $datagen is missing (build it first)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
file=$out/coeff_$res.h5
log=$out/datagen_inputs_$res.log
rm -f "$file"

modes=()
[ -n "${GRF_MODES:-}" ] && modes=(--grf-modes "$GRF_MODES")
echo "datagen_inputs: $res x $res on ${DEVICE:-cuda} -> $file" | tee "$log"
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -v)  # the host's peak memory
start=$(date +%s.%N)
"${timer[@]}" "$datagen" --inputs-only --resolution "$res" --samples 1 --seed "${SEED:-0}" \
  --device "${DEVICE:-cuda}" --progress plain "${modes[@]}" --out "$file" >> "$log" 2>&1
rc=$?
end=$(date +%s.%N)
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
peak_kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
seconds=$(sed -n 's/^seconds //p' "$log")
parts=$(grep '^draw_seconds' "$log")
echo "exit $rc, wall ${wall} s (fno_datagen's seconds: ${seconds:-?})" | tee -a "$log"
echo "host peak RSS $((${peak_kb:-0} / 1024)) MiB; file $(stat -c %s "$file" 2> /dev/null || echo 0) bytes" |
  tee -a "$log"
if [ -n "$parts" ] && [ -n "$seconds" ]; then
  # shellcheck disable=SC2086
  set -- $parts
  echo "$parts; the rest (setup, the last write, fsync, rename): $(awk -v t="$seconds" -v a="$2" \
    -v b="$4" -v c="$6" 'BEGIN { printf "%.2f", t - a - b - c }')" | tee -a "$log"
fi

# The disk alone: 4 GiB written and fsynced beside the file, for comparison.
dd if=/dev/zero of="$out/dd_probe" bs=64M count=64 conv=fsync 2>&1 | tail -1 | sed 's/^/disk: /' |
  tee -a "$log"
rm -f "$out/dd_probe"

if [ "$rc" -eq 0 ] && "$py" -c 'import h5py' 2> /dev/null; then
  "$py" - "$file" "$res" << 'EOF' 2>&1 | tee -a "$log"
import sys, h5py, numpy as np
path, r = sys.argv[1], int(sys.argv[2])
with h5py.File(path) as f:
    d = f["coeff"]
    assert d.shape == (1, r, r) and d.dtype == np.float32, (d.shape, d.dtype)
    assert d.chunks[0] == 1 and d.chunks[2] == r and d.compression is None, d.chunks
    assert "no solution u was computed" in f.attrs["solution"]
    rows = np.concatenate([d[0, i : i + 1] for i in (0, r // 3, r // 2, r - 1)])
    assert set(np.unique(rows)) <= {3.0, 12.0}
    print(f"check: ok, chunks {d.chunks}, grf_modes {int(f.attrs['grf_modes'])}, "
          f"a = 12 on {np.mean(rows == 12):.2f} of 4 rows")
EOF
fi
[ "${KEEP:-0}" = 1 ] || rm -f "$file"
exit $rc
