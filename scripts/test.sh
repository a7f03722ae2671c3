#!/usr/bin/env bash
# The README's test command: set up (or reuse) the environment, lint, then run
# the whole test suite for real: Horovod, OpenMPI, sshd in emulated hosts.
set -euo pipefail

case "${1:-}" in
  -h|--help)
    cat <<'USAGE'
Usage: scripts/test.sh [PYTEST ARGS...]

Runs scripts/setup.sh for PyTorch, TensorFlow and MXNet (fast when already
set up), ruff, then pytest with the
given arguments (e.g. -k resume, -m "not cluster"). Tests on the emulated
hosts need root; elsewhere they are skipped with the reason.
USAGE
    exit 0 ;;
esac

cd "$(dirname "$0")/.."
# All three frameworks: the suite trains each of them for real.
scripts/setup.sh --frameworks pytorch,tensorflow,mxnet
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
