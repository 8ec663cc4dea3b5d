#!/usr/bin/env bash
# nsdata: a set of the FNO paper's Navier-Stokes table (NSDATA_NU 1e-3 / NSDATA_T 50, or 1e-4 /
#   30, 1e-5 / 20; 256^2 -> 64^2, 1200 samples, 200 for testing, seed 0, float32, dt NSDATA_DT
#   1e-4) by fno_datagen --resume, one worker per GPU, stopped by SIGTERM at NSDATA_DEADLINE
#   (560) s after this script started; the kept batches stay in NSDATA_DIR (/tmp/fno-nsdata) for
#   the next call on the same warm machine only (docs/data.md: nothing larger than 64 MiB
#   travels, so a fresh machine starts again)
# Run on the GPU machine from the repository root: scripts/gpu.sh nsdata (several suites
# in one call: scripts/gpu.sh nsdata OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: NU_T, NSDATA_NU (1e-3), NSDATA_T (50), NSDATA_SAMPLES (1200), NSDATA_DIR
#   (/tmp/fno-nsdata), NSDATA_DEADLINE (560), NSDATA_GPUS (1), NSDATA_DEVICE (cuda),
#   NSDATA_BATCH, NSDATA_DT (1e-4), NSDATA_RES (256), NSDATA_SUB (4), NSDATA_TEST (200),
#   NSDATA_PRECISION (float32), NSDATA_VAL (0: validation samples made after the test samples,
#   in the test file; nstrain evaluates them as the set 'val')
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsdata
# issue 27: a set of the FNO paper's Navier-Stokes table (NSDATA_NU, default 1e-3, with
# NSDATA_T 50 records; 1e-4: 30, 1e-5: 20), resumable within one warm machine, solved
# in float32 as the paper's ns_2d.py (NSDATA_PRECISION) with dt NSDATA_DT (1e-4, the
# paper's). fno_datagen --resume keeps each finished batch (NSDATA_BATCH samples,
# default up to 64, shared evenly over the workers: about 150 s at T 50 on an H100 in
# float32, 2.3-2.4 s a sample) in
# $dir/ns_v$NU_T$T.h5.partial/; timeout's SIGTERM at the deadline abandons the batches
# in flight (exit 143) and the next call goes on after the kept ones. On a machine of
# several GPUs, one worker per GPU (--worker K/N --device cuda:K) makes every N-th
# batch, and a last run without workers writes the files once all are kept (the same
# bytes as one run). The machine's disk lasts only while it stays warm (30 s after a
# call, 30 min held at most), and ~1 GB cannot travel either way (64 MiB a call), so
# the set completes only if a chain of calls on one machine makes all NSDATA_SAMPLES
# (1200, NSDATA_TEST 200 of them for testing) samples
# (docs/data.md#resumable-generation). NSDATA_RES, NSDATA_SUB and NSDATA_DEVICE (256,
# 4, cuda) are for trying the suite small; NSDATA_GPUS caps the workers (on the CPU it
# sets their number, default 1).
local nu=${NSDATA_NU:-1e-3} tf=${NSDATA_T:-50} n=$((${NSDATA_SAMPLES:-1200} + ${NSDATA_VAL:-0}))
local dir=${NSDATA_DIR:-/tmp/fno-nsdata} d=$out/nsdata
local data=$dir/ns_v${nu}_T${tf}.h5
mkdir -p "$dir" "$d"
kept_samples() {  # the samples in the kept batches (samples_FIRST_END.h5)
  ls "$data.partial" 2> /dev/null |
    sed -n 's/^samples_0*\([0-9][0-9]*\)_0*\([0-9][0-9]*\)\.h5$/\1 \2/p' |
    awk '{ s += $2 - $1 } END { print s + 0 }'
}
local before left t rc gpus
before=$(kept_samples)
left=$((${NSDATA_DEADLINE:-560} - ($(date +%s) - script_t0)))
gpus=${NSDATA_GPUS:-1}  # (on the CPU: that many worker processes, for trying)
if [ "${NSDATA_DEVICE:-cuda}" = cuda ]; then
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
  [ "$gpus" -ge 1 ] || gpus=1
  [ -n "${NSDATA_GPUS:-}" ] && [ "$NSDATA_GPUS" -lt "$gpus" ] && gpus=$NSDATA_GPUS
fi
# The batch: NSDATA_BATCH, or 64 and fewer so that the batches share out evenly over the
# workers (1200 samples on 4 GPUs: 20 batches of 60, 5 a worker, where 64 gave 19 and left
# one worker a batch short while the others made their fifth)
local rounds batch=${NSDATA_BATCH:-}
if [ -z "$batch" ]; then
  rounds=$(((n + gpus * 64 - 1) / (gpus * 64)))
  batch=$(((n + gpus * rounds - 1) / (gpus * rounds)))
fi
local gen=("$build/apps/fno_datagen" --problem ns --viscosity "$nu" --t-final "$tf"
  --dt "${NSDATA_DT:-1e-4}" --resolution "${NSDATA_RES:-256}" --subsample "${NSDATA_SUB:-4}"
  --samples "$n" --test-samples "$((${NSDATA_TEST:-200} + ${NSDATA_VAL:-0}))" --seed 0
  --precision "${NSDATA_PRECISION:-float32}" --batch "$batch" --progress plain
  --resume --out "$data")
if [ -f "${data%.h5}_train.h5" ] && [ -f "${data%.h5}_test.h5" ]; then
  say "nsdata: $data done already: $(ls -l "${data%.h5}"_t*.h5 | awk '{print $5, $9}' | tr '\n' ' ')"
elif [ "$left" -lt 60 ]; then
  say "nsdata: $left s left before the deadline; not started ($before samples kept)"
else
  t=$(date +%s)
  rc=0
  if [ "$gpus" -gt 1 ]; then
    local k pids=()
    for k in $(seq 0 $((gpus - 1))); do
      local dev=${NSDATA_DEVICE:-cuda}
      [ "$dev" = cuda ] && dev=cuda:$k
      timeout -s TERM -k 60 "$left" "${gen[@]}" --device "$dev" --worker "$k/$gpus" \
        > "$d/datagen$k.out" 2>> "$d/datagen$k.log" &
      pids+=($!)
    done
    for k in "${pids[@]}"; do wait "$k" || rc=$?; done
    # every batch kept: the files (no solve left; at once)
    if [ "$rc" = 0 ]; then
      "${gen[@]}" --device "${NSDATA_DEVICE:-cuda}" > "$d/datagen.out" 2>> "$d/datagen.log"
      rc=$?
    fi
  else
    timeout -s TERM -k 60 "$left" "${gen[@]}" --device "${NSDATA_DEVICE:-cuda}" \
      > "$d/datagen.out" 2>> "$d/datagen.log"
    rc=$?
  fi
  local after secs
  after=$(kept_samples)
  [ "$rc" = 0 ] && after=$n
  secs=$(($(date +%s) - t))
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$rc" "$secs" "$before" "$after" \
    "$gpus" >> "$dir/segments.tsv"
  cp "$dir/segments.tsv" "$d/"
  say "nsdata: exit $rc after $secs s on $gpus GPU(s); samples kept $before -> $after of $n" \
    "($(awk -v n=$((after - before)) -v s="$secs" 'BEGIN { if (n > 0) printf "%.2f s a sample", s / n; else print "none made" }'))"
  tail -1 "$d/datagen.log" 2> /dev/null | cut -c1-250 | tee -a "$summary"
fi
