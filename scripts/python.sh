#!/usr/bin/env bash
# The one way the project's commands start Python: the interpreter with the
# project's packages, this checkout's package first on the path.
set -euo pipefail

case "${1:-}" in
  -h|--help)
    cat <<'USAGE'
Usage: scripts/python.sh -m horovod_train COMMAND [ARGS...]
       scripts/python.sh -m horovod_train --help     (the commands)

Runs Python with this checkout first on PYTHONPATH, so the checkout's code
runs whether or not the package is installed (a checkout mounted into the
image, say). The interpreter: $HVT_PYTHON if set, else the checkout's .venv
(scripts/setup.sh), else python3 on PATH (the image's, or a bare one before
any environment exists: the commands that build the image or emulate hosts
need the standard library only).

Every command under scripts/ starts the package's front door this way
(horovod_train/__main__.py); benchmarks/run_matrix.sh starts the lab's
benchmarks.matrix.
USAGE
    exit 0 ;;
esac

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${HVT_PYTHON:-}"
if [[ -z "$python" ]]; then
  python=python3
  [[ -x "$repo/.venv/bin/python" ]] && python="$repo/.venv/bin/python"
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" "$@"
