#!/usr/bin/env bash
# Step times of two builds in one GPU-machine call: the code before a change
# (BASE_BUILD, built from a copy of this checkout with the files in BASE_FILES
# put back: a folder holding their old versions at their paths, and an
# optional DELETED list of paths to remove) and this checkout (BUILD), rows
# interleaved (base, new, base, new) so that drift hits both alike.
#
#   BASE_FILES=.base bench/ab_step_times.sh OUT_DIR ROWSET...
#
# Row sets (fno_bench, the seed FNO, median of BENCH_STEPS steps):
#   big      1024^2 b8 none fp32; 6 x 2400^2 recompute fp32; 4096^2 b2 auto under 4 GiB (tiles)
#   small    64^2 and 128^2 b32 none fp32 (CUDA graphs)
#   r1024    1024^2 b8 none fp32 alone
# AB_REPS (2) pairs of runs a row.
# AB_ONLY_BASE=1 builds the base alone and stops (while this checkout builds elsewhere).
# Writes OUT_DIR/{base,new}_ROW_K.{json,log} and OUT_DIR/ab.txt (one line a row:
# both medians and new/base).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$1
shift
mkdir -p "$out"
build=${BUILD:-/tmp/fno-gpu-build}
base=${BASE_BUILD:-/tmp/fno-base-build}
steps=${BENCH_STEPS:-10}
py=$(command -v python3)
torch_cmake=$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)')

configure_build() {  # SRC BUILD
  [ -f "$2/build.ninja" ] || cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFNO_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$torch_cmake" -DFNO_PYTHON="$py" \
    --log-level=WARNING > "$2.configure.log" 2>&1 && cmake --build "$2" --target fno_bench \
    > "$2.build.log" 2>&1
}
if [ ! -x "$base/apps/fno_bench" ]; then
  src=/tmp/fno-base-src
  rm -rf "$src" && mkdir -p "$src"
  tar -C "$root" --exclude=./.git --exclude=./build --exclude=./.venv --exclude=./results -cf - . |
    tar -C "$src" -xf -
  if [ -n "${BASE_FILES:-}" ]; then
    cp -r "$root/$BASE_FILES/." "$src/"
    [ -f "$root/$BASE_FILES/DELETED" ] && (cd "$src" && xargs -r rm -f < "$root/$BASE_FILES/DELETED")
  fi
  configure_build "$src" "$base" || { tail -30 "$base.build.log"; exit 1; }
fi
[ "${AB_ONLY_BASE:-0}" = 1 ] && exit 0  # (the base build alone, beside another build)
[ -x "$build/apps/fno_bench" ] || configure_build "$root" "$build" ||
  { tail -30 "$build.build.log"; exit 1; }

rows=()
for set in "$@"; do
  case $set in
    big)
      rows+=("r1024|--resolutions 1024 --batches 8 --policies none"
        "r2400x6|--resolutions 2400 --batches 6 --policies recompute"
        "r4096tiled|--resolutions 4096 --batches 2 --policies auto --gpu-memory-limit 4GiB") ;;
    r1024) rows+=("r1024|--resolutions 1024 --batches 8 --policies none") ;;
    small)
      rows+=("r64|--resolutions 64 --batches 32 --policies none"
        "r128|--resolutions 128 --batches 32 --policies none") ;;
  esac
done
export FNO_PLAN_CACHE=$out/plans  # auto's plan searched once, then the same plan for both builds
median() { grep -o '"ms_per_step": *[0-9.]*' "$1" | head -1 | grep -o '[0-9.]*$'; }
: > "$out/ab.txt"
for row in "${rows[@]}"; do
  name=${row%%|*}
  read -r -a args <<< "${row#*|}"
  for k in $(seq "${AB_REPS:-2}"); do
    for which in base new; do
      exe=$build/apps/fno_bench
      [ $which = base ] && exe=$base/apps/fno_bench
      timeout 300 "$exe" "${args[@]}" --precision fp32 --warmup 3 --steps "$steps" \
        --json "$out/${which}_${name}_$k.json" > /dev/null 2> "$out/${which}_${name}_$k.log"
      echo "$name $which $k: exit $? median $(median "$out/${which}_${name}_$k.json") ms"
    done
  done | tee -a "$out/ab.txt"
done
