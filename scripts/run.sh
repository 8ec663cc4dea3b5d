#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), builds fno_train alone (not the tests;
# the fused CUDA kernels only where a GPU is visible), and runs the main job:
# Darcy training on the shipped data (configs/darcy.yaml: train at 16x16,
# evaluate at 16x16 and, zero-shot, at 32x32). Outputs go to runs/darcy-<time>/.
# Extra arguments go to fno_train (see build/apps/fno_train --help), e.g.
#   scripts/run.sh --set training.epochs=5
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FNO_VENV=torch FNO_BUILD_TARGETS=fno_train "$root/scripts/setup.sh"
build=${FNO_BUILD_DIR:-$root/build}
# (from the caller's directory: relative paths given with --set resolve against it)
exec "$build/apps/fno_train" --config "$root/configs/darcy.yaml" \
  --out "$root/runs/darcy-$(date +%Y%m%d-%H%M%S)" "$@"
