#!/usr/bin/env bash
# Emulated cluster on one machine: hosts a and b as network namespaces with
# their own hostname, /etc/hosts and sshd on port 22 (key-only), as bare hosts.
#   scripts/emulate_cluster.sh up | exec HOST -- CMD... | status | down
# Needs root. Logic in horovod_train/emulation/cluster.py; see --help.
set -euo pipefail
exec "$(dirname "$0")/python.sh" -m horovod_train emulate-cluster "$@"
