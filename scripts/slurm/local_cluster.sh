#!/usr/bin/env bash
# A real Slurm on this machine, over the emulated hosts a and b: controller
# ctl on their bridge, a slurmd in each host, munge.
#   scripts/slurm/local_cluster.sh up | env | status | down
# Needs root, Debian's slurm-wlm and munge, and scripts/emulate_cluster.sh up
# first. The logic lives in local_cluster.py; see --help.
set -euo pipefail
exec python3 "$(dirname "$0")/local_cluster.py" "$@"
