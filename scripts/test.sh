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
  echo "test.sh: phase times: $(IFS=';'; echo "${phases[*]:-none}" | sed 's/;/, /g')"
  exit "$code"
}
trap report EXIT

# All three frameworks: the suite trains each of them for real. No GPU
# operations: the CPU image shares this Horovod wheel. As root, where the
# images are built too, every package is downloaded once, into the
# wheelhouse both images build from, and the venv is set up from it.
setup=(scripts/setup.sh --frameworks pytorch,tensorflow,mxnet --gpu-ops none)
if [[ $(id -u) -eq 0 ]]; then
  house=$(scripts/build_image.sh --wheelhouse-only)
  PIP_FIND_LINKS=$house PIP_NO_INDEX=1 "${setup[@]}"
else
  "${setup[@]}"
fi
end_phase setup
# Both images, built with podman from docker/ as the context, as users type
# it, then the image that carries the code, from the repository root, on the
# GPU one's layers (root needed for podman's storage and for running them as
# emulated hosts).
if [[ $(id -u) -eq 0 ]]; then
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
