#!/usr/bin/env bash
# The README's test command: set up (or reuse) the environment and both
# images, lint, then run the whole test suite for real: Horovod, OpenMPI,
# sshd in emulated hosts, each image run as two hosts. Ends with the time of
# each phase.
set -euo pipefail

case "${1:-}" in
  -h|--help)
    cat <<'USAGE'
Usage: scripts/test.sh [PYTEST ARGS...]

Runs scripts/setup.sh for PyTorch, TensorFlow and MXNet and
scripts/build_image.sh for the GPU and the CPU image and the image that
carries the code (all fast when already done), ruff, then pytest with the
given arguments (e.g. -k resume,
-m "not cluster"). Tests on the emulated hosts and the images need root;
elsewhere they are skipped with the reason. Three tiers run only when
named: scripts/test.sh tests/distro (a bare Debian 13 set up and trained
on) and scripts/test.sh tests/cuda12 (the CUDA 12 image built and run),
tens of minutes each, and scripts/test.sh tests/preflight (every case of
the preflight alone, ten clean runs in a row, minutes).
USAGE
    exit 0 ;;
esac

cd "$(dirname "$0")/.."
phases=()
phase_started=$SECONDS
end_phase() {
  phases+=("$1 $((SECONDS - phase_started)) s")
  phase_started=$SECONDS
}
report() {
  local code=$?
  # A wheelhouse left half-filled is filled again next time (no COMPLETE mark).
  [[ -z "${house_pid:-}" ]] || kill "$house_pid" 2>/dev/null || true
  echo "test.sh: phase times: $(IFS=';'; echo "${phases[*]:-none}" | sed 's/;/, /g')"
  exit "$code"
}
trap report EXIT

# As root, where the images are built too, the wheelhouse they build from
# is filled beside the setup (network beside compiling; the setup installs
# from uv's cache and the index).
house_pid=""
if [[ $(id -u) -eq 0 ]]; then
  scripts/build_image.sh --wheelhouse-only >/dev/null & house_pid=$!
fi
# All three frameworks: the suite trains each of them for real. No GPU
# operations: the CPU image shares this Horovod wheel.
scripts/setup.sh --frameworks pytorch,tensorflow,mxnet --gpu-ops none
end_phase setup
# Both images, built with podman from docker/ as the context, as users type
# it, then the image that carries the code, from the repository root, on the
# GPU one's layers (root needed for podman's storage and for running them as
# emulated hosts).
if [[ $(id -u) -eq 0 ]]; then
  wait "$house_pid" || { echo "test.sh: error: filling the wheelhouse failed (above)" >&2; exit 1; }
  house_pid=""
  end_phase wheelhouse
  scripts/build_image.sh --device cpu
  end_phase "cpu image"
  scripts/build_image.sh --device gpu
  end_phase "gpu image"
  scripts/build_image.sh --app
  end_phase "app image"
else
  echo "test.sh: not root: the images are not built and their tests will be skipped"
fi
.venv/bin/ruff check .
end_phase lint
set +e
.venv/bin/python -m pytest "$@"
code=$?
set -e
end_phase tests
exit "$code"
