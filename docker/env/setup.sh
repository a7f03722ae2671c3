#!/usr/bin/env bash
# The environment recipe: system packages (OpenMPI, OpenSSH, compilers), a
# venv with the pinned Python packages, and Horovod built from source or taken
# from the wheel cache. scripts/setup.sh (a checkout's .venv) and the image's
# builder (docker/Dockerfile, /opt/venv) both run this file. Safe to run
# again: it only does what is missing.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: docker/env/setup.sh --venv DIR [--frameworks LIST] [--gpu-ops auto|nccl|none]
                           [--cuda-archs LIST] [--cuda 13|12] [--keras 3|2] [--dev]
                           [--editable PROJECT] [--no-apt]
                           [--no-horovod] [--check-options]

  --venv DIR         virtual environment to create or update
  --frameworks LIST  comma-separated: pytorch, tensorflow, mxnet (default: the
                     frameworks this venv was last set up for, else pytorch)
  --gpu-ops MODE     Horovod's NCCL GPU operations: nccl, none, or auto (nccl
                     when a GPU is present); default: nccl with --cuda, else what
                     this venv has (not none where a GPU is present), else auto
  --cuda-archs LIST  GPU architectures Horovod's CUDA kernels are compiled for,
                     comma-separated compute capabilities (e.g. 80,90), or torch
                     (default): every one the venv's torch has native code for,
                     the newest also as PTX for later GPUs
  --cuda 13|12       torch's CUDA major: 13 (the lock's torch), or 12 for drivers
                     before R580 (torch 2.10, constraints-cuda12.txt); default: what
                     this venv has, else what the NVIDIA driver runs (12 before
                     R580; before R525 setup stops), else 13
  --keras 3|2        tf.keras: 3, TensorFlow's own, or 2, tf-keras, for Keras 2
                     scripts (TF_USE_LEGACY_KERAS=1 in every process of the venv;
                     needs tensorflow); default: what this venv has, else 3
  --dev              add the test and lint tools
  --editable PROJECT install that project into the venv, editable, without its dependencies,
                     and put its root on the venv's path (its lab: benchmarks/, the
                     emulated hosts), as the image's PYTHONPATH puts the checkout
  --no-apt           install no system packages (a system without apt, or without
                     root): Open MPI, a C++17 compiler, ssh, patch, patchelf and ip
                     must be on PATH (modules count); the missing one is named
  --no-horovod       everything but Horovod (the image's layer its variants share)
  --check-options    check the options, say in one line what would be set up, and
                     exit, installing nothing

Environment: HVT_PYTHON (the interpreter for a new venv, default python3),
HVT_WHEEL_CACHE (default ~/.cache/horovod-train/wheels). The packages are
installed by uv, from its cache when it has them (no network needed);
pip's PIP_FIND_LINKS, PIP_NO_INDEX, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and
PIP_CERT are handed to it. The first run compiles mpi4py and Horovod
(minutes); later runs, in any venv, take the cached wheel built for these
frameworks or more.
EOF
}

die() { echo "setup.sh: error: $*" >&2; exit 2; }

frameworks=""
gpu_ops=""
cuda_archs=torch
cuda=""
keras=""
venv=""
dev=0
editable=""
apt=1
horovod=1
check_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --frameworks) frameworks="${2:?--frameworks needs a value}"; shift 2 ;;
    --gpu-ops) gpu_ops="${2:?--gpu-ops needs a value}"; shift 2 ;;
    --cuda-archs) cuda_archs="${2:?--cuda-archs needs a value}"; shift 2 ;;
    --cuda) cuda="${2:?--cuda needs a value}"; shift 2 ;;
    --keras) keras="${2:?--keras needs a value}"; shift 2 ;;
    --venv) venv="${2:?--venv needs a value}"; shift 2 ;;
    --dev) dev=1; shift ;;
    --editable) editable="${2:?--editable needs a value}"; shift 2 ;;
    --no-apt) apt=0; shift ;;
    --no-horovod) horovod=0; shift ;;
    --check-options) check_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -n "$venv" ]] || die "--venv DIR is required (see --help)"
here=$(cd "$(dirname "$0")" && pwd)
[[ -z "$gpu_ops" || "$gpu_ops" =~ ^(auto|nccl|none)$ ]] \
  || die "--gpu-ops: '$gpu_ops'; it takes auto, nccl, none"

# Keep what the venv has: a later plain setup (e.g. from demo.sh) must not
# swap a three-framework or NCCL Horovod for a PyTorch-only or CPU one.
[[ -n "$frameworks" ]] || frameworks=$(cat "$venv/horovod-frameworks" 2>/dev/null || echo pytorch)
IFS=, read -ra wanted <<< "$frameworks"
wants() { [[ " ${wanted[*]} " == *" $1 "* ]]; }
kept_cuda=$(cat "$venv/horovod-cuda" 2>/dev/null || true)
# Which frameworks NCCL can serve: Horovod compiles its GPU operations into
# every framework's binding and refuses one without CUDA. torch's wheels are
# CUDA builds of either major, TensorFlow's GPU wheel a CUDA 12 one, MXNet's
# last a CUDA 11.2 one.
nccl_serves() {  # CUDA: whether an NCCL Horovod can serve the frameworks on it
  ! wants mxnet && { ! wants tensorflow || [[ "$1" == 12 ]]; }
}
# GPU operations follow the GPUs the environment is for, not the machine it
# is set up on: asked for (--gpu-ops), else NCCL where a CUDA is asked for
# (a login node without GPUs sets up for the compute nodes'), else the
# venv's choice, but not a CPU-only one on a machine with GPUs (the test
# command's, say), else the machine's GPUs (auto). A change is said.
has_gpu() { nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
kept_gpu_ops=$(cat "$venv/horovod-gpu-ops" 2>/dev/null || true)
gpu_ops_from=""  # where a choice not asked for came from, said with it
if [[ -z "$gpu_ops" ]]; then
  gpu_ops=${kept_gpu_ops:-auto} gpu_ops_from="this venv's choice"
  if [[ -n "$cuda" ]]; then
    gpu_ops=nccl gpu_ops_from="--cuda $cuda"
  elif [[ "$kept_gpu_ops" == none ]] && has_gpu; then
    if nccl_serves "${kept_cuda:-12}"; then
      gpu_ops=nccl gpu_ops_from="a GPU here"
    else
      echo "setup.sh: this machine has GPUs, and Horovod stays CPU-only for $frameworks" \
           "(NCCL serves pytorch, and tensorflow on CUDA 12): --frameworks pytorch" \
           "--gpu-ops nccl, or --frameworks pytorch,tensorflow --cuda 12, for the GPUs"
    fi
  fi
  if [[ -n "$kept_gpu_ops" && "$gpu_ops" != "$kept_gpu_ops" ]]; then
    echo "setup.sh: Horovod's GPU operations: $gpu_ops ($gpu_ops_from), was $kept_gpu_ops;" \
         "--gpu-ops $kept_gpu_ops keeps them"
  fi
fi
if [[ "$gpu_ops" == auto ]]; then
  gpu_ops=none gpu_ops_from="auto: no GPU here"
  has_gpu && gpu_ops=nccl gpu_ops_from="auto: a GPU here"
fi
# torch's CUDA major: what --cuda says, else what the venv has, else 12 for
# TensorFlow on GPUs (its GPU wheels are CUDA 12 builds), else what the
# NVIDIA driver runs (nvidia_driver.py's rule, said in one line; a driver
# too old for any is refused here, before any download), else 13.
# A bare machine has no interpreter to ask yet: the choice waits for the
# system packages, which bring one.
choose_cuda=0
if [[ -z "$cuda" && -z "$kept_cuda" && "$gpu_ops" != none ]]; then
  if [[ "$gpu_ops" == nccl ]] && wants tensorflow; then
    cuda=12
  elif "${HVT_PYTHON:-python3}" -c '' 2>/dev/null; then
    cuda=$("${HVT_PYTHON:-python3}" "$here/nvidia_driver.py" --choose-cuda) || exit 2
  else
    choose_cuda=1 cuda=13
  fi
fi
cuda_from=""
[[ -n "$cuda" ]] || cuda=${kept_cuda:-13} cuda_from=" (this venv's)"
# Bad input is refused here, before minutes of installing.
[[ ${#wanted[@]} -gt 0 ]] || die "--frameworks is empty; it takes pytorch, tensorflow, mxnet"
for f in "${wanted[@]}"; do
  [[ "$f" =~ ^(pytorch|tensorflow|mxnet)$ ]] \
    || die "--frameworks: unknown framework '$f'; it takes pytorch, tensorflow, mxnet"
done
[[ "$cuda_archs" == torch || "$cuda_archs" =~ ^[1-9][0-9]{1,2}[a-z]?(,[1-9][0-9]{1,2}[a-z]?)*$ ]] \
  || die "--cuda-archs: '$cuda_archs'; it takes compute capabilities like 80,90, or torch"
[[ "$cuda" =~ ^(13|12)$ ]] || die "--cuda: '$cuda'; it takes 13 or 12"
# Keras 2 is TensorFlow's; a venv that drops TensorFlow drops it too.
if [[ -z "$keras" ]]; then
  keras=3
  wants tensorflow && keras=$(cat "$venv/horovod-keras" 2>/dev/null || echo 3)
fi
[[ "$keras" =~ ^(3|2)$ ]] || die "--keras: '$keras'; it takes 3 or 2"
[[ "$keras" == 3 ]] || wants tensorflow \
  || die "--keras 2 is tf.keras of TensorFlow: add tensorflow to --frameworks (got $frameworks)"
if [[ "$gpu_ops" == nccl ]]; then
  ! wants mxnet || die "--gpu-ops nccl${gpu_ops_from:+ (from $gpu_ops_from)} builds Horovod for" \
      "pytorch and tensorflow (got --frameworks $frameworks); MXNet runs in a --gpu-ops none environment"
  nccl_serves "$cuda" || die "TensorFlow on GPUs needs CUDA 12 (its GPU wheels are CUDA 12" \
      "builds), and this is CUDA $cuda$cuda_from: add --cuda 12"
fi
# The Python rule: each framework on the Pythons framework-pythons.txt
# gives it (MXNet 1.9 on 3.11 alone). It is checked on the venv's
# interpreter once there is one, else HVT_PYTHON's: here when that runs
# already, else once the system packages brought it.
framework_pythons() {  # FRAMEWORK: its Pythons, space-separated
  sed 's/#.*//' "$here/framework-pythons.txt" | awk -v f="$1" '$1 == f { $1 = ""; print substr($0, 2) }'
}
python_rule() {
  local version f all
  version=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 1
  all=$(sed 's/#.*//' "$here/framework-pythons.txt" | awk '{ $1 = ""; print }' | tr ' ' '\n' \
        | grep . | sort -uV | paste -sd' ')
  [[ " $all " == *" $version "* ]] \
    || die "Python ${all// /, } needed; $1 is $version; set HVT_PYTHON"
  for f in "${wanted[@]}"; do
    [[ " $(framework_pythons "$f") " == *" $version "* ]] \
      || die "$f needs Python $(framework_pythons "$f" | sed 's/ /, /g'); $1 is $version: set HVT_PYTHON to a Python it takes, or leave $f out"
  done
}
rule_python=${HVT_PYTHON:-python3}
[[ -x "$venv/bin/python" ]] && rule_python=$venv/bin/python
python_rule "$rule_python" || true
if [[ $check_only -eq 1 ]]; then
  echo "setup.sh: would set up $frameworks, GPU operations $gpu_ops${gpu_ops_from:+" ($gpu_ops_from)"}," \
       "CUDA $cuda, Keras $keras"
  exit 0
fi
started=$SECONDS

# System packages: MPI and its headers, ssh client and server, compilers,
# patch and patchelf (Horovod's build), iproute2/util-linux for the emulated
# cluster.
packages=(openmpi-bin libopenmpi-dev openssh-client openssh-server build-essential patch
          patchelf iproute2 util-linux procps curl ca-certificates)
# NCCL builds: the user-space RDMA stack that NCCL's InfiniBand/RoCE
# transport loads (libibverbs, the devices' providers such as libmlx5) and
# Open MPI's UCX uses (librdmacm), with the tools to check a device:
# ibv_devices and ibv_devinfo, ibstat, ib_write_bw.
if [[ "$gpu_ops" == nccl ]]; then
  packages+=(libibverbs1 ibverbs-providers librdmacm1 ibverbs-utils rdmacm-utils
             infiniband-diags perftest)
fi
python=${HVT_PYTHON:-python3}
"$python" -c 'import ensurepip' 2>/dev/null || packages+=(python3-venv)
# Python's headers: mpi4py and Horovod compile against them.
"$python" -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  2>/dev/null || packages+=(python3-dev)
missing=()
if [[ $apt -eq 0 ]]; then
  # Nothing installed for us: the commands setup needs, found on PATH
  # (modules count), whatever the distribution.
  "$python" -c '' 2>/dev/null || die "--no-apt: $python does not run; set HVT_PYTHON"
  "$python" "$here/system_tools.py" || exit 2
elif command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
else
  die "setup installs system packages with apt (Debian, Ubuntu), and this system has no" \
      "apt: give --no-apt with Open MPI, a C++17 compiler, ssh, patch, patchelf and ip on" \
      "PATH (modules count), or run the image (Apptainer or Pyxis, docs/slurm-and-kubernetes.md)"
fi
# The cold path overlaps what does not wait on another: apt installs beside
# the Python packages (only the compiles need its packages), and mpi4py
# compiles beside Horovod. A venv that cannot be made yet (no python3-venv,
# no interpreter) waits for apt.
apt_pid=""
# Whatever ends this script waits for what runs beside it: no apt-get or
# install is left half-done.
trap wait EXIT
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup.sh: installing ${missing[*]}"
  apt_install() {
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  }
  if [[ -x "$venv/bin/python" ]] || { "$python" -c 'import ensurepip' 2>/dev/null \
       && [[ ! " ${missing[*]} " =~ " python3-venv " ]]; }; then
    apt_install & apt_pid=$!
  else
    apt_install
  fi
fi
wait_for_apt() {
  [[ -z "$apt_pid" ]] || wait "$apt_pid" || die "installing ${missing[*]} failed (apt-get's message above)"
  apt_pid=""
}

# Python environment, pinned by the lock beside this file.
if [[ $choose_cuda -eq 1 ]]; then
  wait_for_apt
  cuda=$("$python" "$here/nvidia_driver.py" --choose-cuda) || exit 2
  [[ -n "$cuda" ]] || cuda=13  # no driver: the lock's own
fi
if [[ ! -x "$venv/bin/python" ]]; then
  python_rule "$python" || die "$python does not run; set HVT_PYTHON"
  echo "setup.sh: creating $venv"
  "$python" -m venv "$venv"
fi
groups=(core horovod build plots "${wanted[@]}")
# TensorFlow with NCCL is its GPU wheel (`tensorflow`, CUDA 12), else its CPU one.
[[ "$gpu_ops" == nccl ]] && groups=("${groups[@]/#tensorflow/tensorflow-gpu}")
[[ $dev -eq 1 ]] && groups+=(test slurm)
requirements=()
for g in "${groups[@]}"; do requirements+=(-r "$here/requirements/$g.txt"); done
# The lock of torch's CUDA major: CUDA 12's is constraints.txt with
# constraints-cuda12.txt's pins in place of its own.
lock="$here/constraints.txt"
if [[ "$cuda" == 12 ]]; then
  lock="$venv/constraints-cuda12.txt"
  "$venv/bin/python" "$here/lock.py" --cuda 12 > "$lock"
fi
# The installer is uv, pinned in the lock and put in the venv by pip: it
# keeps each package unpacked in its cache and links the files into a venv,
# so a second venv (another clone, a rerun) installs in seconds where pip
# unpacks gigabytes again. Its wheel is kept beside Horovod's, so that a new
# venv gets it offline too. It reads its own settings, not pip's: pip's
# wheelhouse, index and CA bundle are handed over here.
if [[ ! -x "$venv/bin/uv" ]]; then
  kept="${HVT_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/horovod-train/wheels}/uv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" install --quiet --no-index --find-links "$kept" -c "$lock" uv 2>/dev/null || {
    "${pip[@]}" download --quiet --no-deps -d "$kept" -c "$lock" uv \
      && "${pip[@]}" install --quiet --no-index --find-links "$kept" -c "$lock" uv
  } || die "installing uv failed (pip's message above)"
fi
export UV_NATIVE_TLS=${UV_NATIVE_TLS:-1}
[[ -n "${PIP_CERT:-}" && -z "${SSL_CERT_FILE:-}" ]] && export SSL_CERT_FILE=$PIP_CERT
uv_flags=(--quiet --python "$venv/bin/python" -c "$lock")
for links in ${PIP_FIND_LINKS:-}; do uv_flags+=(--find-links "$links"); done
[[ -n "${PIP_INDEX_URL:-}" ]] && uv_flags+=(--index-url "$PIP_INDEX_URL")
for index in ${PIP_EXTRA_INDEX_URL:-}; do uv_flags+=(--extra-index-url "$index"); done
[[ "${PIP_NO_INDEX:-}" =~ ^(1|true|yes|on)$ ]] && uv_flags+=(--no-index)
# From the cache alone first: no index is asked when everything is there
# (offline too); else from the index, which fills the cache.
uv_install() {
  "$venv/bin/uv" pip install "${uv_flags[@]}" --offline "$@" 2>/dev/null \
    || "$venv/bin/uv" pip install "${uv_flags[@]}" "$@"
}
# The two TensorFlow wheels fill one package directory: the one not wanted
# goes first (a venv that turns to the GPUs, or back).
if wants tensorflow; then
  unwanted=tensorflow
  [[ "$gpu_ops" == nccl ]] && unwanted=tensorflow-cpu
  "$venv/bin/uv" pip uninstall --quiet --python "$venv/bin/python" "$unwanted" 2>/dev/null || true
fi
echo "setup.sh: installing pinned Python packages (${groups[*]} mpi, CUDA $cuda) into $venv"
# Compiled to bytecode where installed (uv leaves it to the first import):
# where PYTHONDONTWRITEBYTECODE is set, as containers often have it, no
# import writes it, and every rank would compile the frameworks' modules
# again at its start. A run that installs nothing compiles nothing.
uv_install --compile-bytecode "${requirements[@]}"
if wants tensorflow; then
  # Keras 2 scripts run on tf-keras beside Keras 3 (TF_USE_LEGACY_KERAS=1 makes
  # it tf.keras): the lock's pin (the release of its TensorFlow), without its
  # dependencies, which name the `tensorflow` package and would install it
  # over tensorflow-cpu.
  keras2=$(grep -m 1 -E '^tf-keras==' "$lock" | cut -d';' -f1)
  [[ -n "$keras2" ]] || die "the lock $lock pins no tf-keras"
  uv_install --compile-bytecode --no-deps "$keras2"
fi
echo "$cuda" > "$venv/horovod-cuda"
# Fixes no release will carry (MXNet is retired), before anything imports it.
"$venv/bin/python" "$here/patch_packages.py" || die "patching the installed packages failed"
if [[ -n "$editable" ]]; then
  uv_install --no-deps -e "$editable"
  # The installed package is the product; the checkout's lab (benchmarks/,
  # the emulation) is reached through the checkout's root on the path.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  (cd "$editable" && pwd) > "$site/horovod-train-checkout.pth"
fi
wait_for_apt
# mpi4py is compiled against this machine's OpenMPI, never taken from the
# index as a wheel: minutes of one core the first time, then the wheel kept
# in the wheel cache under a key of that OpenMPI, its compiler and Python
# (mpi4py_wheel.py), which the image's build mounts too.
{ mpi4py=$("$venv/bin/python" "$here/mpi4py_wheel.py" --python "$venv/bin/python" --lock "$lock") \
    && { [[ -z "$mpi4py" ]] || uv_install --no-deps "$mpi4py"; }; } & mpi_pid=$!
wait_for_mpi4py() {
  wait "$mpi_pid" || die "installing mpi4py failed (its message above)"
}

# Horovod: the one recipe, beside this file.
if [[ $horovod -eq 0 ]]; then
  wait_for_mpi4py
  echo "setup.sh: done without Horovod in $((SECONDS - started)) s"
  exit 0
fi
HVT_PYTHON="$venv/bin/python" "$here/build_horovod.sh" --python "$venv/bin/python" \
  --frameworks "$frameworks" --gpu-ops "$gpu_ops" --cuda-archs "$cuda_archs"
wait_for_mpi4py
echo "$frameworks" > "$venv/horovod-frameworks"
echo "$gpu_ops" > "$venv/horovod-gpu-ops"
"$venv/bin/python" "$here/keras_choice.py" --python "$venv/bin/python" --keras "$keras" \
  || die "choosing Keras $keras failed (its message above)"
echo "$keras" > "$venv/horovod-keras"
echo "setup.sh: done in $((SECONDS - started)) s"
