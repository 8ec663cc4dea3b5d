#!/usr/bin/env bash
# nsepoch: seconds per epoch of the paper's models (NSEPOCH_CONFIGS, nu = 1e-5's by default;
#   CFG%KEY=VALUE and CFG*N as nstrain's) on a small nsdata set (issue 27), also from an
#   fno_train of the code before (NSEPOCH_BASE_TRAIN)
# Run on the GPU machine from the repository root: scripts/gpu.sh nsepoch (several suites
# in one call: scripts/gpu.sh nsepoch OTHER ...). scripts/gpu/lib.sh builds first and sets
# $out ($OUT/results), say, $bench and the shared helpers.
# Environment: NSDATA_NU (1e-3), NSDATA_T (50), NSDATA_DIR (/tmp/fno-nsdata), NSEPOCH_EPOCHS
#   (4), NSEPOCH_CONFIGS (ns_v1e-5_fno3d ns_v1e-5_fno2d), NSEPOCH_BASE_TRAIN, NSEPOCH_TRAIN
#   (100), NSDATA_TEST (200)
# shellcheck disable=SC2154,SC2168  # (sourced by run_suite in lib.sh: its variables, in a function)
[ "${BASH_SOURCE[0]}" != "$0" ] || exec bash "$(dirname "$0")/../gpu.sh" nsepoch
# issue 27: seconds per epoch of paper models (NSEPOCH_CONFIGS, by default
# configs/ns_v1e-5_fno{3d,2d}.yaml, each with optional %KEY=VALUE sets as nstrain's; graphs on) on nsdata's set (the same NSDATA_*: run nsdata first, small), NSEPOCH_TRAIN
# (100) training samples, NSEPOCH_EPOCHS (4) epochs, one evaluation at the end; first with
# NSEPOCH_BASE_TRAIN (an fno_train built from the code before), when set
local nu=${NSDATA_NU:-1e-3} tf=${NSDATA_T:-50} dir=${NSDATA_DIR:-/tmp/fno-nsdata}
local stem ep=${NSEPOCH_EPOCHS:-4} cfg exe tag
stem=$dir/ns_v${nu}_T${tf}
mkdir -p "$out/nsepoch"
if [ ! -f "${stem}_test.h5" ]; then
  say "nsepoch: no ${stem}_test.h5 (run nsdata with the same NSDATA_* first)"
  return
fi
local spec sets kv1 ranks base_cfg
for spec in ${NSEPOCH_CONFIGS:-ns_v1e-5_fno3d ns_v1e-5_fno2d}; do
  # CFG%KEY=VALUE (repeatable): that --set for this config alone; CFG*N: on N GPUs
  # under torchrun, each rank a share of the config's batch (as nstrain's)
  ranks=$(ns_spec_ranks "$spec")
  base_cfg=${spec%%\%*} sets=()
  base_cfg=${base_cfg%%\**}
  cfg=$base_cfg
  [ "$ranks" -gt 1 ] && cfg+=_ranks$ranks
  [[ $spec == *%* ]] && IFS=% read -r -a sets <<< "${spec#*%}"
  ns_rank_split "$base_cfg" "$ranks" "nsepoch $cfg" || continue
  local extra=("${rank_args[@]}")
  for kv1 in "${sets[@]}"; do
    extra+=(--set "$kv1")
    cfg+=_$(set_tag "$kv1")
  done
  for tag in ${NSEPOCH_BASE_TRAIN:+base} now; do
    exe=$build/apps/fno_train
    [ "$tag" = base ] && exe=$NSEPOCH_BASE_TRAIN
    rm -rf "$dir/epoch_${cfg}_$tag"
    timeout 200 "${train_launcher[@]}" "$exe" --config "configs/$base_cfg.yaml" \
      --out "$dir/epoch_${cfg}_$tag" "${extra[@]}" \
      --set "data.train_file=${stem}_train.h5" --set "data.n_train=${NSEPOCH_TRAIN:-100}" \
      --set "data.test=[{file: ${stem}_test.h5, name: ns, n_samples: ${NSDATA_TEST:-200}, batch_size: 10}]" \
      --set "training.epochs=$ep" --set "training.eval_every=$ep" --set output.progress=none \
      > "$out/nsepoch/${cfg}_$tag.out" 2> "$out/nsepoch/${cfg}_$tag.log"
    say "nsepoch $cfg $tag: exit $? seconds per epoch: $(python3 -c 'import json,sys; print(" ".join("%.3f" % json.loads(l)["seconds"] for l in open(sys.argv[1])))' "$dir/epoch_${cfg}_$tag/metrics.jsonl" 2> /dev/null)"
    cp "$dir/epoch_${cfg}_$tag/metrics.jsonl" "$out/nsepoch/${cfg}_$tag.metrics.jsonl" 2> /dev/null
  done
done
