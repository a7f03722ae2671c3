#!/usr/bin/env bash
# Throughput of a workload on a matrix of layouts (1x1 1x2 2x2 2x4 by
# default), Horovod and torchrun + DDP side by side; writes results.json,
# scaling.csv, scaling.md and scaling.png. See --help. Logic in
# benchmarks/matrix.py.
set -euo pipefail
exec "$(dirname "$0")/../scripts/python.sh" -m benchmarks.matrix "$@"
