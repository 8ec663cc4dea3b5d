#!/usr/bin/env bash
# Here, between two GPU calls of `scripts/gpu.sh paper` (issue 15's long trainings):
# makes .paper/sS/ (ignored by git, named in the next call's `carry`) from what the
# last call returned: the run files in its results.tgz and the checkpoint parts.
#
#   scripts/paper_carry.sh S FILES_AT        e.g. scripts/paper_carry.sh 421 /work/.device/7
set -euo pipefail
s=${1:?usage: scripts/paper_carry.sh S FILES_AT}
from=${2:?usage: scripts/paper_carry.sh S FILES_AT}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
grep -qx '/.paper/' "$root/.git/info/exclude" 2> /dev/null || echo '/.paper/' >> "$root/.git/info/exclude"
ls "$from"/paper_s"$s".ckpt.part* > /dev/null 2>&1 || {
  echo "paper_carry: no $from/paper_s$s.ckpt.part* (the run finished, or the call returned no checkpoint)" >&2
  exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$from/results.tgz" -C "$tmp" "results/paper_s$s"
dst=$root/.paper/s$s
rm -rf "$dst" && mkdir -p "$dst"
cp "$tmp/results/paper_s$s"/{config.yaml,metrics.jsonl,segments.tsv} "$dst/"
cp "$from"/paper_s"$s".ckpt.part* "$dst/"
for f in "$dst"/paper_s"$s".ckpt.part*; do mv "$f" "$dst/checkpoint_latest.pt.part${f##*.part}"; done
echo "paper_carry: $dst ($(du -sh "$dst" | cut -f1)); pass carry [\".paper\"] to the next call"
