#!/usr/bin/env bash
# fno_bench from the outside, as far as a CPU allows: --config reads a training
# config with fno_train's parser, so a bad config gets fno_train's one-line
# error and exit code, and --dry-run builds the model and prints its parameter
# count (the same as fno_train's) and the resolved settings, without a GPU.
#   test_fno_bench.sh FNO_BENCH FNO_TRAIN SOURCE_DIR WORK_DIR
set -u
bin=$1 train=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
small=$src/tests/cli/small.yaml darcy=$src/configs/darcy.yaml

"$bin" --help > "$work/help" 2>&1 && grep -q -- "--config" "$work/help" && grep -q -- "--dry-run" "$work/help" &&
  ok || bad "--help"

# dry_run ARGS...: fno_bench --dry-run exits 0; its stdout is in $work/out.
dry_run() { "$bin" "$@" --dry-run > "$work/out" 2> "$work/err" || { bad "fno_bench $* --dry-run: $(cat "$work/err")"; return 1; }; }
# train_params ARGS...: fno_train --dry-run's n_params for the same config.
train_params() { "$train" "$@" --dry-run --out "$work/train_dry" 2> /dev/null | awk '$1 == "n_params" { print $2 }'; }
has() { grep -qxF -- "$1" "$work/out" && ok || bad "fno_bench $2: stdout lacks '$1': $(cat "$work/out")"; }

# The seed model, by default and from the seed config; the settings are printed.
dry_run && has "n_params 1192801" "(no config)" &&
  { grep -q "(from the seed model)" "$work/out" && ok || bad "no config: not the seed model: $(cat "$work/out")"; }
dry_run --config "$darcy" --resolutions 64,128 --batches 4 --policies none,auto --gpu-memory-limit 8GiB &&
  has "n_params 1192801" "--config darcy.yaml" && has "resolutions 64, 128" "--resolutions" &&
  has "batches 4" "--batches" && has "policies none, auto" "--policies" &&
  has "auto budget 8.00 GiB" "--gpu-memory-limit" && has "auto search at most 60 s" "(default)" &&
  { grep -q "(from $darcy)" "$work/out" && ok || bad "--config darcy.yaml: source not named: $(cat "$work/out")"; }
# Other widths, depths and modes: the parameter count is fno_train's.
for set in "model.hidden_channels=12" "model.n_layers=3" "model.n_modes=[4, 6]"; do
  want=$(train_params --config "$small" --set "$set")
  [ -n "$want" ] && [ "$want" != 1192801 ] || bad "fno_train --dry-run --set $set gave no n_params"
  dry_run --config "$small" --set "$set" && has "n_params $want" "--config small.yaml --set $set"
done
# A 3D model (fno_train would refuse the 2D data): inputs get three grid dims.
dry_run --config "$small" --set "model.n_modes=[4, 4, 4]" && has "input [batch, 1, N, N, N], N in resolutions" "3D"

# A space-time Navier-Stokes config: N x N x t_out (40), or --time-length T; 0 for a cube.
ns3d=$src/configs/ns_v1e-3_fno3d.yaml
dry_run --config "$ns3d" --resolutions 256 && has "input [batch, 10, N, N, 40], N in resolutions" "ns 3D" &&
  has "time length 40" "ns 3D"
dry_run --config "$ns3d" --resolutions 256 --time-length 50 &&
  has "input [batch, 10, N, N, 50], N in resolutions" "ns 3D --time-length 50"
dry_run --config "$ns3d" --time-length 0 && has "input [batch, 10, N, N, N], N in resolutions" "--time-length 0"
expect 2 "--time-length 40 needs a 3D model (2D here)" -- --config "$darcy" --time-length 40 --dry-run
# --cuda-graphs: auto by default, else as given or as the config's training.cuda_graphs.
dry_run && has "cuda graphs auto" "(default)"
dry_run --cuda-graphs off && has "cuda graphs off" "--cuda-graphs off"
dry_run --config "$small" --set training.cuda_graphs=on && has "cuda graphs on" "training.cuda_graphs=on"
expect 2 "--cuda-graphs: unknown cuda_graphs setting 'maybe' (expected auto, on or off)" -- --cuda-graphs maybe --dry-run

# --domain-parallel: under torchrun with a multiple of it; the baseline flag only with it.
expect 2 "--domain-parallel 2 does not divide the world size 1" -- --domain-parallel 2 --dry-run
expect 2 "--one-gpu-baseline applies to --domain-parallel only" -- --one-gpu-baseline 0 --dry-run
expect 2 "--domain-parallel" -- --domain-parallel 0 --dry-run
expect 2 "--set needs --config" -- --set model.hidden_channels=8 --dry-run
expect 2 "--policies: unknown offload policy 'sometimes'" -- --config "$darcy" --policies sometimes --dry-run

# A bad config: fno_bench's one line is fno_train's, word for word, with the same exit code.
printf 'model: [1, 2\n' > "$work/malformed.yaml"
printf '' > "$work/empty.yaml"
printf 'model:\n  hidden_channels: 8\n  colour: red\n' > "$work/unknown.yaml"
printf 'model:\n  hidden_channels: 8\n' > "$work/no_data.yaml"
same_error() {
  local pattern=$1; shift 2
  expect 2 "$pattern" -- "$@" --dry-run
  "$train" "$@" --dry-run --out "$work/train_dry" > /dev/null 2> "$work/train_err"
  local rc=$?
  if [ "$rc" -eq 2 ] && [ "$(sed 's/^fno_bench: //' "$work/err")" = "$(sed 's/^fno_train: //' "$work/train_err")" ]; then ok
  else bad "fno_bench $* says '$(cat "$work/err")'; fno_train (exit $rc) says '$(cat "$work/train_err")'"; fi
}
same_error "nope.yaml: cannot read the config file" -- --config "$work/nope.yaml"
same_error "malformed.yaml:.*malformed YAML" -- --config "$work/malformed.yaml"
same_error "empty.yaml: empty config" -- --config "$work/empty.yaml"
same_error "unknown.yaml:3: model.colour: unknown key" -- --config "$work/unknown.yaml"
same_error "no_data.yaml (default): data.train_file: missing" -- --config "$work/no_data.yaml"
same_error "expected section.key=value" -- --config "$small" --set model.hidden_channels
same_error "model.hidden_channels: expected an integer >= 1, got 'wide'" -- --config "$small" --set model.hidden_channels=wide
same_error "model.n_modes: expected an integer >= 1, got -2" -- --config "$small" --set "model.n_modes=[8, -2]"
same_error "model.domain_padding: needs 0, 1 or 2 entries" -- --config "$small" --set "model.domain_padding=[0.1, 0.1, 0.1]"

# Impossible combinations and unwritable outputs fail first: under --dry-run,
# and without it before the device (this machine may have none: exit 2, not 4).
for dry in --dry-run ""; do
  expect 2 "--find-largest needs --cap (the memory to fit)" -- --find-largest $dry
  expect 2 "--grid-step 512 is larger than --grid-max 256: the search has no grid to try" -- \
    --find-largest --cap 8GiB --grid-step 512 --grid-max 256 $dry
  expect 2 "--grid-step applies to --find-largest only" -- --grid-step 64 $dry
  expect 2 "--grid-max applies to --find-largest only" -- --grid-max 1024 $dry
  expect 2 "--plan-cache keeps the auto policy's plans, which --policies leaves out" -- --policies none,all --plan-cache "$work" $dry
  expect 2 "--search-seconds bounds the auto policy's search, which --policies leaves out" -- --policies none,all --search-seconds 5 $dry
  expect 2 "--json: '$work/no/such' is not a directory" -- --json "$work/no/such/r.json" $dry
  expect 2 "--csv: '$work' is a directory" -- --csv "$work" $dry
  expect 2 "--trace: '$work/nodir' is not a directory" -- --trace "$work/nodir/t.json" $dry
  expect 2 "--timeline-dir: '$work/nodir' is not a directory" -- --timeline-dir "$work/nodir" $dry
  # Derived counts: a grid whose activations pass 2^53 elements.
  expect 2 "--resolutions 4294967296 with --batches 8: an activation of .* elements, over 2^53: smaller grids or batches" -- \
    --resolutions 4294967296 $dry
  expect 2 "--grid-max 1000000000 with --batches 8: an activation of .* elements, over 2^53" -- \
    --find-largest --cap 8GiB --grid-max 1000000000 $dry
  expect 2 "--resolutions 4096 with --batches 100000000: an activation of .* elements, over 2^53" -- \
    --config "$small" --set "model.n_modes=[4, 4, 4]" --resolutions 4096 --batches 100000000 $dry
done
# Each memory size names its option.
expect 2 "--cap: bad memory size '12XB'" -- --cap 12XB --dry-run
expect 2 "--gpu-memory-limit: bad memory size '0': must be > 0" -- --gpu-memory-limit 0 --dry-run
expect 2 "--cap: bad memory size '99999999TiB': must be at most 9e18 bytes (8 EiB)" -- --cap 99999999TiB --dry-run
expect 2 "--max-inflight-mib: expected auto or a whole number of MiB" -- --max-inflight-mib lots --dry-run
expect 2 "--compress: " -- --compress zip --dry-run
dry_run --search-seconds 2.5 && has "auto search at most 2.5 s" "--search-seconds 2.5"
for v in -1 x 1e999 5s; do
  expect 2 "--search-seconds: expected a number of seconds >= 0, got '$v'" -- --search-seconds "$v" --dry-run
done
[ -z "$(ls "$work" | grep -v '^out$\|^err$\|^help$\|^train_dry$\|^train_err$\|\.yaml$')" ] && ok ||
  bad "refused commands left files: $(ls "$work")"
# Without a GPU, a real run: one line, the program named once.
if ! nvidia-smi -L > /dev/null 2>&1; then
  expect 4 "^fno_bench: no CUDA device is visible; the benchmarks run on a GPU machine" -- --resolutions 16 --steps 1
  ! grep -q "fno_bench: fno_bench" "$work/err" && ok || bad "the program named twice: $(cat "$work/err")"
fi

finish "fno_bench CLI"
