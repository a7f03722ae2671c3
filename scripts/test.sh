#!/usr/bin/env bash
# The README's test command: set up (or reuse) the environment and the image,
# lint, then run the whole test suite for real: Horovod, OpenMPI, sshd in
# emulated hosts, the image run as two hosts.
set -euo pipefail

case "${1:-}" in
  -h|--help)
    cat <<'USAGE'
Usage: scripts/test.sh [PYTEST ARGS...]

Runs scripts/setup.sh for PyTorch, TensorFlow and MXNet and
scripts/build_image.sh for the CPU image (both fast when already done), ruff,
then pytest with the given arguments (e.g. -k resume, -m "not cluster").
Tests on the emulated hosts and the image need root; elsewhere they are
skipped with the reason.
USAGE
    exit 0 ;;
esac

cd "$(dirname "$0")/.."
# All three frameworks: the suite trains each of them for real.
scripts/setup.sh --frameworks pytorch,tensorflow,mxnet
# The CPU image, built for real with podman (root needed for its storage and
# for running it as emulated hosts); its tests skip, saying why, elsewhere.
if [[ $(id -u) -eq 0 ]]; then
  scripts/build_image.sh --device cpu
else
  echo "test.sh: not root: the image is not built and its tests will be skipped"
fi
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
