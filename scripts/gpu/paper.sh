#!/usr/bin/env bash
# paper: a row of the FNO paper's table (PAPER_S=211|421), resumable across calls (see it)
# Run on the GPU machine from the repository root: scripts/gpu.sh paper (several suites
# in one call: scripts/gpu.sh paper OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: PAPER_S (211), PAPER_DEADLINE (555)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" paper
# issue 15: one row of the FNO paper's Darcy table (configs/darcy_paper_s$PAPER_S.yaml,
# 500 epochs), resumable across calls. The data (1200 samples at 421^2, seed 0, every
# k-th node) are made again each call (same bytes); training stops by SIGTERM at
# PAPER_DEADLINE s after this script started (a checkpoint mid-epoch) and the next call
# resumes from .paper/s$PAPER_S/ (carried: the run directory as this suite left it, the
# checkpoint reassembled from $OUT/paper_s$PAPER_S.ckpt.part*, each under 16 MiB).
local s=${PAPER_S:-211}
local k=$((420 / (s - 1))) d=$out/paper_s$s data=/tmp/paper_data run=/tmp/paper_run_s$s
mkdir -p "$d" "$data"
local t=$(date +%s)
"$build/apps/fno_datagen" --resolution 421 --subsample $k --samples 1200 --test-samples 200 \
  --seed 0 --device cuda --progress plain --out "$data/darcy_s$s.h5" > "$d/datagen.log" 2>&1
say "paper s=$s: datagen exit $? in $(($(date +%s) - t)) s"
local args=(--config "configs/darcy_paper_s$s.yaml" --out "$run"
  --set "data.train_file=$data/darcy_s${s}_train.h5" --set data.n_train=1000
  --set "data.test=[{file: $data/darcy_s${s}_test.h5, name: '$s', n_samples: 200, batch_size: 20}]")
if [ -f ".paper/s$s/config.yaml" ]; then
  rm -rf "$run" && cp -r ".paper/s$s" "$run"
  cat ".paper/s$s"/checkpoint_latest.pt.part* > "$run/checkpoint_latest.pt"
  rm -f "$run"/checkpoint_latest.pt.part*
  args=(--resume "$run")
fi
train_until "${PAPER_DEADLINE:-555}" "paper s=$s" "$run" "$d" "${args[@]}"
if [ -n "${OUT:-}" ] && [ -f "$run/checkpoint_latest.pt" ] && [ "$train_rc" != 0 ]; then
  split -b 15M -d "$run/checkpoint_latest.pt" "$OUT/paper_s$s.ckpt.part"
  ls -la "$OUT"/paper_s$s.ckpt.part* | tee -a "$summary"
fi
