#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), builds, and runs the main job.
# Until fno_train lands this is fno_smoke: the Darcy seed FNO taking AdamW
# steps under the H1 loss. Extra arguments go to the program (see --help).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build=${FNO_BUILD_DIR:-$root/build}
exec "$build/apps/fno_smoke" "$@"
