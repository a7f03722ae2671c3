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

Environment: HOROVOD_WHEEL_CACHE (default ~/.cache/horovod-train/wheels).
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

# System packages: MPI and its headers, ssh client and server, compilers,
# patch, and iproute2/util-linux for the emulated cluster.
packages=(openmpi-bin libopenmpi-dev openssh-client openssh-server build-essential patch
          iproute2 util-linux procps curl ca-certificates)
python3 -c 'import ensurepip' 2>/dev/null || packages+=(python3-venv)
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
  python3 -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 10), (3, 11)))' || {
    echo "setup.sh: error: Python 3.10 or 3.11 needed (TensorFlow 2.15 and MXNet 1.9 stop there); found $(python3 --version)" >&2
    exit 1
  }
  echo "setup.sh: creating $venv"
  python3 -m venv "$venv"
fi
extras="horovod-deps,build,plots,test"
[[ ",$frameworks," == *,tensorflow,* ]] && extras+=",tensorflow"
[[ ",$frameworks," == *,mxnet,* ]] && extras+=",mxnet"
echo "setup.sh: installing pinned Python packages ($extras) into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -c scripts/constraints.txt -e ".[$extras]"

# Horovod: the one recipe, shared with docker/Dockerfile.
scripts/build_horovod.sh --python "$venv/bin/python" --frameworks "$frameworks" --gpu-ops "$gpu_ops"
echo "$frameworks" > "$venv/horovod-frameworks"
echo "setup.sh: done in $((SECONDS - started)) s; activate with: source $venv/bin/activate"
