# shellcheck shell=bash disable=SC2154
# The CLI tests' harness: pass/fail counters and the one-line-error check.
# Source it after setting bin (the program under test) and work (a scratch
# directory); end the test with `finish`.
failures=0 passed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- ARGS...: exit code CODE, stderr one line matching PATTERN.
expect() {
  local code=$1 pattern=$2 name rc lines; shift 3
  name=$(basename "$bin")
  "$bin" "$@" > "$work/out" 2> "$work/err"
  rc=$?
  lines=$(wc -l < "$work/err")
  if [ "$rc" -ne "$code" ]; then bad "$name $* exited $rc, expected $code: $(cat "$work/err")"; return; fi
  if [ "$lines" -ne 1 ]; then bad "$name $*: $lines lines on stderr, expected 1: $(cat "$work/err")"; return; fi
  if ! grep -q -- "$pattern" "$work/err"; then bad "$name $*: stderr lacks '$pattern': $(cat "$work/err")"; return; fi
  ok
}

# finish [LABEL]: prints the counts; succeeds when nothing failed.
finish() {
  echo "${1:+$1: }$passed passed, $failures failed"
  [ "$failures" -eq 0 ]
}

# verdicts FILE: an ok or a bad for each "ok A B ..." or "differ A B WHY" line a
# compare script (domain_compare.py, predict_domain_compare.py) wrote to FILE.
verdicts() {
  local verdict a b rest
  while read -r verdict a b rest; do
    case $verdict in
      ok) ok ;;
      differ) bad "$(basename "$a") vs $(basename "${b%:}"): $rest" ;;
    esac
  done < "$1"
}

# The domain tests' runs against one process's (test_domain.sh,
# test_domain_benchmark.sh, test_predict_domain.sh; each sets pairs=()).
# check_run NAME BASELINE RC [EXT]: the run exited 0 (else a bad with its last
# lines); $work/NAME$EXT and $work/BASELINE$EXT join `pairs`, compared at the end.
check_run() {
  if [ "$3" -ne 0 ]; then bad "$1 exited $3: $(grep -v '^\[' "$work/$1.err" | tail -3)"; return; fi
  pairs+=("$work/$1${4:-}" "$work/$2${4:-}")
}
# compare_pairs OUT SCRIPT ARGS...: SCRIPT's verdicts (domain_compare.py,
# predict_domain_compare.py, beside this file) on ARGS, written to OUT, one ok
# or bad a pair; a bad when it gave none.
compare_pairs() {
  local out=$1 script=$2; shift 2
  "$python" "$(dirname "${BASH_SOURCE[0]}")/$script" "$@" > "$out" 2>&1
  verdicts "$out"
  grep -qE '^(ok|differ) ' "$out" || bad "$script: $(tail -3 "$out")"
}

# write_nsr_config FILE DATA: a tiny recurrent Navier-Stokes run (FNO-2D, 4
# records in, 4 out) on DATA's records, its first 12 samples trained on, as
# the domain-parallel tests (Gloo and NCCL) compare it against one process.
write_nsr_config() {
  cat > "$1" << EOF
model: {n_modes: [6, 6], in_channels: 4, out_channels: 1, hidden_channels: 8, n_layers: 2}
data:
  problem: ns
  ns_mode: recurrent
  t_in: 4
  t_out: 4
  train_file: $2
  n_train: 12
  batch_size: 4
  encode_input: false
  encode_output: false
  n_predictions: 2
  test:
    - {file: $2, name: ns, first: 12, n_samples: 4, batch_size: 2}
    - {file: $2, name: head, n_samples: 4}
optimizer: {lr: 8.0e-3}
training: {epochs: 2, loss: h1, eval_losses: [l2]}
EOF
}

# make_well_set DIR YAML: The Well's layout at 8 x 8 (bench/make_well_set.py:
# 2 fields, 2 trajectories of 6 steps, one shard, splits train and valid) in
# DIR, and a tiny run on it in YAML (2 records in, 2 rollout steps, its valid
# split as the test set), as the domain-parallel tests (Gloo and NCCL)
# compare it against one process. Needs $python and $src. Fails (1) when the
# set cannot be made.
make_well_set() {
  "$python" "$src/bench/make_well_set.py" "$1" --grid 8 8 --steps 6 --trajectories 2 \
    --shards 1 --fields 2 --splits train valid > /dev/null || return 1
  cat > "$2" << EOF
model: {n_modes: [4, 4], hidden_channels: 8, n_layers: 2, in_channels: 4, out_channels: 2}
data:
  format: well
  train_file: $1
  history: 2
  horizon: 1
  batch_size: 4
  encode_input: true
  n_predictions: 2
  test: [{file: $1, split: valid, name: valid, batch_size: 3}]
optimizer: {lr: 8.0e-3}
training: {epochs: 2, loss: l2, eval_losses: [l2]}
EOF
}
