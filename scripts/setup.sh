#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian/Ubuntu machine, then
# configures and builds it. Safe to re-run: each step skips what is done.
#
#   scripts/setup.sh            # -> build/ (Release, Ninja), every target
#
# Environment:
#   FNO_BUILD_DIR      build directory (default: build)
#   FNO_PYTHON         a python3 that has torch 2.11 (skips the project venv)
#   FNO_VENV           all (default): every pinned Python package; torch (scripts/run.sh):
#                      the torch wheel and its dependencies alone
#   FNO_BUILD_TARGETS  build only these targets (space-separated; scripts/run.sh: fno_train)
#   FNO_CUDA_KERNELS   AUTO (default: compile the fused CUDA kernels only where a GPU
#                      is visible), ON (whenever nvcc is there; scripts/test.sh) or OFF;
#                      a value other than the build directory's reconfigures it
#   FNO_UNITY_BUILD    ON (default): the libraries' files compiled in batches of 8; OFF:
#                      one by one (a build directory keeps what it was configured with)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FNO_BUILD_DIR:-$root/build}
log() { printf '[setup] %s\n' "$*"; }

# 1. Debian packages: compilers, CMake/Ninja/ccache, HDF5, yaml-cpp, CLI11, doctest.
pkgs=(g++ cmake ninja-build ccache libhdf5-dev libyaml-cpp-dev libcli11-dev doctest-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  if ! { "${sudo_cmd[@]}" apt-get update -qq && \
         DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
    log "warning: could not install ${missing[*]}; continuing with what is there"
  fi
fi

# 2. Python with torch 2.11 (LibTorch and its CMake config come from the torch wheel).
# torch_cmake PY: prints the torch wheel's CMake prefix when PY has torch 2.11, from the
# package's metadata (importing torch would load its libraries: seconds, three times).
torch_cmake() {
  "$1" - 2>/dev/null <<'PY'
import importlib.metadata as md, importlib.util as iu, os, sys
try:
    ok = md.version("torch").startswith("2.11.")
except md.PackageNotFoundError:
    ok = False
spec = iu.find_spec("torch") if ok else None
if spec is None or spec.origin is None:
    sys.exit(1)
print(os.path.join(os.path.dirname(spec.origin), "share", "cmake"))
PY
}
has_torch() { torch_cmake "$1" >/dev/null; }
py=${FNO_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$root/.venv/bin/python" ] || ! has_torch python3; then
    py=$root/.venv/bin/python
    if [ ! -x "$py" ]; then
      log "creating the project venv in .venv"
      python3 -m venv "$root/.venv"
    fi
    # Everything (the tests' and notebooks' packages too), or with FNO_VENV=torch
    # (scripts/run.sh) the pinned torch wheel and its own dependencies alone; a later
    # setup without FNO_VENV adds the rest. No bytecode is compiled ahead (--no-compile):
    # Python compiles what it imports, when it first imports it.
    pip=("$py" -m pip install -q --disable-pip-version-check --no-compile)
    stamp=$root/.venv/.fno-requirements
    want=$(cat "$root/requirements.txt" "$root/requirements-nodeps.txt" | sha256sum | cut -d' ' -f1)
    torch_stamp=$root/.venv/.fno-torch
    torch_want=$(sha256sum < "$root/requirements.txt" | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
      :
    elif [ "${FNO_VENV:-all}" = torch ]; then
      if [ "$(cat "$torch_stamp" 2>/dev/null)" != "$torch_want" ]; then
        torch_pin=$(grep -E '^torch==' "$root/requirements.txt")
        log "installing the pinned torch wheel ($torch_pin) and its dependencies"
        "${pip[@]}" -c "$root/requirements.txt" "$torch_pin"
        echo "$torch_want" > "$torch_stamp"
      fi
    else
      log "installing pinned Python packages (torch 2.11.0, neuraloperator 2.0.0, ...)"
      "${pip[@]}" -r "$root/requirements.txt"
      "${pip[@]}" --no-deps -r "$root/requirements-nodeps.txt"
      echo "$want" > "$stamp"
    fi
  else
    py=$(command -v python3)  # e.g. the GPU machine's preinstalled torch 2.11.0+cu130
  fi
fi
py=$(command -v "$py" || true)
torch_cmake_dir=
[ -n "$py" ] && torch_cmake_dir=$(torch_cmake "$py") ||
  { echo "setup: ${FNO_PYTHON:-python3} has no torch 2.11" >&2; exit 1; }

# 3. Configure (once, or again for another FNO_CUDA_KERNELS) and build.
kernels=()
[ -n "${FNO_CUDA_KERNELS:-}" ] && kernels=(-DFNO_CUDA_KERNELS="$FNO_CUDA_KERNELS")
if [ ! -f "$build/build.ninja" ]; then
  log "configuring $build"
  # (FNO_UNITY_BUILD: the libraries' files compiled in batches, which halves a
  # build from scratch on two cores; FNO_UNITY_BUILD=OFF for builds edited file by file)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_cmake_dir" -DFNO_PYTHON="$py" "${kernels[@]}" \
    -DFNO_UNITY_BUILD="${FNO_UNITY_BUILD:-ON}" --log-level=WARNING
elif [ -n "${FNO_CUDA_KERNELS:-}" ] &&
     ! grep -qx "FNO_CUDA_KERNELS:STRING=$FNO_CUDA_KERNELS" "$build/CMakeCache.txt"; then
  log "reconfiguring $build with FNO_CUDA_KERNELS=$FNO_CUDA_KERNELS"
  cmake -S "$root" -B "$build" "${kernels[@]}" --log-level=WARNING
fi
read -r -a targets <<< "${FNO_BUILD_TARGETS:-}"
if ((${#targets[@]})); then
  log "building ${targets[*]}"
  cmake --build "$build" --target "${targets[@]}"
else
  log "building"
  cmake --build "$build"
fi
