#!/usr/bin/env bash
# nsspeed: the Navier-Stokes generator at 256^2 over one time unit: float64 and float32, batch
#   16/64/256 and automatic, CUDA graphs on and off; seconds a sample at T 50
# Run on the GPU machine from the repository root: scripts/gpu.sh nsspeed (several suites
# in one call: scripts/gpu.sh nsspeed OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: NSSPEED_T (1), NSSPEED_AUTO_SAMPLES (512), NSSPEED_BATCHES (16 64 256 auto),
#   NSSPEED_NOGRAPH (64)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsspeed
# issue 27: the Navier-Stokes generator at the paper's settings (nu 1e-3, dt 1e-4, 256^2
# solved, 64^2 stored) over NSSPEED_T time units (default 1: 10^4 steps), float64 and
# float32, batch 16/64/256 and the automatic batch (NSSPEED_BATCHES; "auto" with
# NSSPEED_AUTO_SAMPLES = 512 samples), then without CUDA graphs (NSSPEED_NOGRAPH,
# default batch 64). Seconds per sample at the paper's T = 50: the solve's time
# (solve_seconds: GRF, writing and the process start left out) x 50 / T / samples.
local d=$out/nsspeed T=${NSSPEED_T:-1}
mkdir -p "$d"
printf 'precision\tcuda_graph\tbatch\tsamples\texit\twall_s\tsolve_s\ts_per_sample_T50\tus_per_sample_step\n' \
  > "$d/nsspeed.tsv"
ns_speed() {  # PRECISION on|off BATCH|auto
  local p=$1 g=$2 b=$3 n=$3 name="$1_$2_b$3" t1 rc wall batch solve
  local extra=(--batch "$b")
  if [ "$b" = auto ]; then n=${NSSPEED_AUTO_SAMPLES:-512}; extra=(); fi
  [ "$g" = off ] && extra+=(--no-cuda-graph)
  t1=$(date +%s%N)
  timeout 300 "$build/apps/fno_datagen" --problem ns --viscosity 1e-3 --resolution 256 \
    --subsample 4 --dt 1e-4 --t-final "$T" --record-every 1 --samples "$n" --seed 0 \
    --device cuda --precision "$p" "${extra[@]}" --progress none \
    --out "$d/ns_$name.h5" > "$d/ns_$name.log" 2>&1
  rc=$?
  wall=$(awk -v t="$(($(date +%s%N) - t1))" 'BEGIN { printf "%.2f", t / 1e9 }')
  batch=$(sed -n 's/^batch //p' "$d/ns_$name.log")
  solve=$(sed -n 's/^solve_seconds //p' "$d/ns_$name.log")
  rm -f "$d/ns_$name.h5"
  if [ "$rc" = 0 ] && [ -n "$solve" ]; then
    awk -v p="$p" -v g="$g" -v b="$batch" -v n="$n" -v w="$wall" -v s="$solve" -v T="$T" \
      'BEGIN { printf "%s\t%s\t%s\t%s\t0\t%s\t%s\t%.3f\t%.3f\n", p, g, b, n, w, s,
               s * 50 / T / n, s / (n * T * 1e4) * 1e6 }' >> "$d/nsspeed.tsv"
    say "ns 256^2 T=$T $p graph $g batch $batch ($b, $n samples): wall $wall s, solve $solve s:" \
      "$(tail -1 "$d/nsspeed.tsv" | cut -f8) s a sample at T=50," \
      "$(tail -1 "$d/nsspeed.tsv" | cut -f9) us a sample-step"
  else
    printf '%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n' "$p" "$g" "$b" "$n" "$rc" "$wall" >> "$d/nsspeed.tsv"
    say "ns 256^2 T=$T $p graph $g batch $b: exit $rc after $wall s; $(tail -1 "$d/ns_$name.log" | cut -c1-200)"
  fi
}
for p in float64 float32; do
  for b in ${NSSPEED_BATCHES:-16 64 256 auto}; do ns_speed "$p" on "$b"; done
done
for p in float64 float32; do
  for b in ${NSSPEED_NOGRAPH:-64}; do ns_speed "$p" off "$b"; done
done
