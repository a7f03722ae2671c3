#!/usr/bin/env bash
# Throughput of a workload on a matrix of layouts (1x1 1x2 2x2 2x4 by
# default), Horovod and torchrun + DDP side by side; writes results.json,
# scaling.csv, scaling.md and scaling.png. See --help. Logic in matrix.py.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# The project's environment when there is one (a checkout after setup.sh),
# else the python on PATH (the image's).
python="${PYTHON:-python3}"
if [[ -z "${PYTHON:-}" && -x "$repo/.venv/bin/python" ]]; then
  python="$repo/.venv/bin/python"
fi
exec "$python" "$repo/benchmarks/matrix.py" "$@"
