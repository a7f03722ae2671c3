#!/usr/bin/env bash
# A real Slurm on this machine, over the emulated hosts a and b: controller
# ctl on their bridge, a slurmd in each host, munge.
#   scripts/slurm/local_cluster.sh up | env | status | down
# Needs root, Debian's slurm-wlm and munge, and scripts/emulate_cluster.sh up
# first. Logic in horovod_train/emulation/slurm.py; see --help.
set -euo pipefail
exec "$(dirname "$0")/../python.sh" -m horovod_train slurm-local-cluster "$@"
