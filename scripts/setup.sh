#!/usr/bin/env bash
# Set up this checkout: system packages (OpenMPI, OpenSSH, compilers), a .venv
# with the pinned Python packages, and Horovod built from source or taken from
# the wheel cache. Safe to run again: it only does what is missing.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/setup.sh [--frameworks LIST] [--gpu-ops auto|nccl|none] [--venv DIR] [--no-apt]

  --frameworks LIST  comma-separated: pytorch, tensorflow, mxnet (default: the
                     frameworks this venv was last set up for, else pytorch)
  --gpu-ops MODE     Horovod's NCCL GPU operations: auto (when a GPU is present), nccl, none
  --venv DIR         virtual environment to create or update (default: .venv)
  --no-apt           do not install system packages; fail if they are missing

Environment: PYTHON (the interpreter for a new venv, default python3),
HOROVOD_WHEEL_CACHE (default ~/.cache/horovod-train/wheels).
The first run builds Horovod (about 5 minutes on 2 cores); later runs take
the cached wheel.
EOF
}

frameworks=""
gpu_ops=auto
venv=.venv
apt=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --frameworks) frameworks="${2:?--frameworks needs a value}"; shift 2 ;;
    --gpu-ops) gpu_ops="${2:?--gpu-ops needs a value}"; shift 2 ;;
    --venv) venv="${2:?--venv needs a value}"; shift 2 ;;
    --no-apt) apt=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
started=$SECONDS
# Keep what the venv has: a later plain setup.sh (e.g. from demo.sh) must not
# swap a three-framework Horovod for a PyTorch-only one.
if [[ -z "$frameworks" ]]; then
  frameworks=$(cat "$venv/horovod-frameworks" 2>/dev/null || echo pytorch)
fi
if [[ "$gpu_ops" == auto ]]; then
  gpu_ops=none
  nvidia-smi -L 2>/dev/null | grep -q '^GPU' && gpu_ops=nccl
fi

# System packages: MPI and its headers, ssh client and server, compilers,
# patch, and iproute2/util-linux for the emulated cluster.
packages=(openmpi-bin libopenmpi-dev openssh-client openssh-server build-essential patch
          iproute2 util-linux procps curl ca-certificates)
python=${PYTHON:-python3}
"$python" -c 'import ensurepip' 2>/dev/null || packages+=(python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $apt -eq 0 ]]; then
    echo "setup.sh: error: missing system packages: ${missing[*]}" >&2; exit 1
  fi
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Python environment, pinned by scripts/constraints.txt.
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null || {
    echo "setup.sh: error: Python 3.11 needed (the lock is for 3.11; TensorFlow 2.15 and MXNet 1.9 stop there); $python is $("$python" --version 2>&1); set PYTHON" >&2
    exit 1
  }
  echo "setup.sh: creating $venv"
  "$python" -m venv "$venv"
fi
extras="horovod-deps,build,mpi,plots,test"
[[ ",$frameworks," == *,pytorch,* ]] && extras+=",pytorch"
if [[ ",$frameworks," == *,tensorflow,* ]]; then
  # A GPU build of Horovod needs TensorFlow's CUDA build beside it.
  [[ "$gpu_ops" == nccl ]] && extras+=",tensorflow-cuda" || extras+=",tensorflow"
fi
[[ ",$frameworks," == *,mxnet,* ]] && extras+=",mxnet"
echo "setup.sh: installing pinned Python packages ($extras) into $venv"
# mpi4py is compiled against this machine's OpenMPI, never taken as a wheel.
PIP_NO_BINARY=mpi4py "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -c scripts/constraints.txt -e ".[$extras]"

# Horovod: the one recipe, shared with docker/Dockerfile.
PYTHON="$venv/bin/python" scripts/build_horovod.sh --python "$venv/bin/python" \
  --frameworks "$frameworks" --gpu-ops "$gpu_ops"
echo "$frameworks" > "$venv/horovod-frameworks"
echo "setup.sh: done in $((SECONDS - started)) s; activate with: source $venv/bin/activate"
