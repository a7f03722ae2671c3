#!/usr/bin/env bash
# What one GPU node gives: the Horovod build, the GPUs' allreduce against
# their link, our trainer against Horovod's example loop, ResNet-50 with
# Horovod and DDP, the backward timeline; JSON and a table in --out-dir.
# Without a GPU it runs the CPU parts and names the others as skipped. See
# --help. Logic in benchmarks/gpu_check.py.
set -euo pipefail
exec "$(dirname "$0")/../scripts/python.sh" -m benchmarks.gpu_check "$@"
