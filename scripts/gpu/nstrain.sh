#!/usr/bin/env bash
# nstrain: configs/$NSTRAIN_CONFIG.yaml (one or more) on nsdata's set (the same NSDATA_*), one
#   config per GPU at once, resumable within one warm machine (SIGTERM at NSTRAIN_DEADLINE, 555
#   s); their metrics come back. NSTRAIN_CARRY=1 brings an unfinished run's checkpoint back
#   ($OUT/carry_NAME.tgz, up to 16 MiB), which a later lease resumes from NSTRAIN_CARRY_IN (e.g.
#   .carry/ns, carried); scripts/ns_lease.sh runs nsdata and nstrain detached, across a lease's
#   calls
# Run on the GPU machine from the repository root: scripts/gpu.sh nstrain (several suites
# in one call: scripts/gpu.sh nstrain OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: NSTRAIN_CONFIG (ns_v1e-3_fno3d), NSDATA_NU (1e-3), NSDATA_T (50), NSDATA_DIR
#   (/tmp/fno-nsdata), NSDATA_TEST (200), NSDATA_VAL (0), NSTRAIN_SET, NSTRAIN_CARRY_IN, NSTRAIN_DEADLINE (555),
#   NSTRAIN_CARRY (0)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nstrain
# One config of nstrain (configs/CFG.yaml, or CFG@SEED: training.seed SEED; *N: N ranks under
# torchrun on the GPUs CUDA_VISIBLE_DEVICES names, each rank a share of the config's
# data.batch_size, so that a step sees the same batch; a suffix %KEY=VALUE, repeatable, adds
# that --set to this run alone) on nsdata's set, into NSDATA_DIR/run_CFG (run_CFG_seedSEED,
# then _ranksN, then _KEY-VALUE for each suffix: the key's last part).
ns_train_one() {
  local spec=${1%%\%*} sets=() kv1 ranks
  [[ $1 == *%* ]] && IFS=% read -r -a sets <<< "${1#*%}"
  ranks=$(ns_spec_ranks "$1")
  spec=${spec%%\**}
  local cfg=${spec%@*} seed='' nu=${NSDATA_NU:-1e-3} tf=${NSDATA_T:-50} dir=${NSDATA_DIR:-/tmp/fno-nsdata}
  [[ $spec == *@* ]] && seed=${spec#*@}
  local name=$cfg${seed:+_seed$seed}
  [ "$ranks" -gt 1 ] && name+=_ranks$ranks
  for kv1 in "${sets[@]}"; do
    name+=_$(set_tag "$kv1")
  done
  local stem=$dir/ns_v${nu}_T${tf} run=$dir/run_$name d=$out/nstrain_$name kv
  mkdir -p "$d"
  if [ ! -f "${stem}_train.h5" ] || [ ! -f "${stem}_test.h5" ]; then
    say "nstrain $name: no ${stem}_train.h5 (run nsdata with the same NSDATA_* first)"
    return
  fi
  # NSDATA_VAL > 0: the validation samples nsdata made after the test samples (never trained on,
  # never the test set), evaluated as 'val': a choice between configs is made on them.
  local val=''
  [ "${NSDATA_VAL:-0}" -gt 0 ] &&
    val=", {file: ${stem}_test.h5, name: val, first: ${NSDATA_TEST:-200}, n_samples: $NSDATA_VAL, batch_size: 10}"
  local args=(--config "configs/$cfg.yaml" --out "$run" --set "data.train_file=${stem}_train.h5"
    --set "data.test=[{file: ${stem}_test.h5, name: ns, n_samples: ${NSDATA_TEST:-200}, batch_size: 10}$val]")
  [ -n "$seed" ] && args+=(--set "training.seed=$seed")
  ns_rank_split "$cfg" "$ranks" "nstrain $name" || return
  args+=("${rank_args[@]}")
  for kv in ${NSTRAIN_SET:-}; do args+=(--set "$kv"); done
  for kv1 in "${sets[@]}"; do args+=(--set "$kv1"); done
  # A run carried from an earlier lease (NSTRAIN_CARRY_IN/carry_NAME.tgz, what NSTRAIN_CARRY=1
  # brought back): its checkpoint goes on, on the set made again from the same seed.
  local carried=${NSTRAIN_CARRY_IN:-}/carry_$name.tgz
  if [ ! -f "$run/checkpoint_latest.pt" ] && [ -n "${NSTRAIN_CARRY_IN:-}" ] && [ -f "$carried" ]; then
    mkdir -p "$run" && tar -xzf "$carried" -C "$run" &&
      say "nstrain $name: resumes the carried run ($(tail -1 "$run/metrics.jsonl" | cut -c1-60))"
  fi
  # A run with a checkpoint goes on; one stopped before its first checkpoint starts again
  # (fno_train writes over no run directory: this script made it, and removes it).
  if [ -f "$run/checkpoint_latest.pt" ]; then args=(--resume "$run"); else rm -rf "$run"; fi
  train_until "${NSTRAIN_DEADLINE:-555}" "nstrain $name" "$run" "$d" "${args[@]}"
  # NSTRAIN_CARRY=1: an unfinished run's latest checkpoint, config and metrics come back as
  # $OUT/carry_NAME.tgz (a file comes back up to 16 MiB: the FNO-2D's, about 11 MB, does; the
  # FNO-3D's does not), for a later lease's NSTRAIN_CARRY_IN.
  if [ "${NSTRAIN_CARRY:-0}" = 1 ] && [ -n "${OUT:-}" ] && [ "$train_rc" != 0 ] &&
    [ -f "$run/checkpoint_latest.pt" ]; then
    tar -C "$run" -czf "$OUT/carry_$name.tgz" checkpoint_latest.pt config.yaml \
      $(cd "$run" && ls metrics.jsonl segments.tsv 2> /dev/null)
    if [ "$(stat -c %s "$OUT/carry_$name.tgz")" -gt 16000000 ]; then
      say "nstrain $name: its checkpoint ($(stat -c %s "$OUT/carry_$name.tgz") bytes packed) is too large to come back"
      rm -f "$OUT/carry_$name.tgz"
    else
      say "nstrain $name: carry_$name.tgz ($(stat -c %s "$OUT/carry_$name.tgz") bytes) comes back"
    fi
  fi
}
# issue 27: models of a row of the paper's Navier-Stokes table (NSTRAIN_CONFIG: one or
# more of configs/*.yaml, space-separated, e.g. "ns_v1e-5_fno3d ns_v1e-5_fno2d"; CFG@SEED
# trains CFG with training.seed SEED into nstrain_CFG_seedSEED, and a suffix
# %KEY=VALUE sets KEY for that run, e.g. ns_v1e-4_fno2d@1%model.use_channel_mlp=false
# into nstrain_ns_v1e-4_fno2d_seed1_use_channel_mlp-false; CFG*N trains on N GPUs, N
# ranks under torchrun) on nsdata's set of that row (the same NSDATA_* settings); on a
# machine of several GPUs each config trains on its own GPUs at the same time (the next
# free ones, round robin), else one after another. Resumable within one warm machine: each run directory stays in NSDATA_DIR,
# fno_train stops by SIGTERM at NSTRAIN_DEADLINE (555) s after this script started (a
# checkpoint mid-epoch), and the next call resumes it. Their metrics.jsonl,
# summary.json, config.yaml and segments.tsv come back in $OUT/nstrain_CONFIG/.
# NSTRAIN_SET adds --set overrides (space-separated key=value, e.g. training.epochs=2).
local cfgs gpus i=0 pids=() p n k devs
read -r -a cfgs <<< "${NSTRAIN_CONFIG:-ns_v1e-3_fno3d}"
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || gpus=1
for p in "${cfgs[@]}"; do
  n=$(ns_spec_ranks "$p")
  if ! [ "$n" -ge 1 ] 2> /dev/null || [ "$n" -gt "$gpus" ]; then
    say "nstrain $p: $n ranks, on $gpus GPU(s); not started"
    continue
  fi
  if [ "$gpus" -gt 1 ]; then
    devs=''
    for k in $(seq 0 $((n - 1))); do devs+=${devs:+,}$(((i + k) % gpus)); done
    (export CUDA_VISIBLE_DEVICES=$devs && ns_train_one "$p") &
    pids+=($!)
  else
    ns_train_one "$p"
  fi
  i=$((i + n))
done
for p in "${pids[@]}"; do wait "$p"; done
