#!/usr/bin/env bash
# horovodrun with its input checked first: host list or hostfile, slots, -np,
# and every remote host's name, SSH port and ssh login, each problem one line
# and exit 2 before anything starts. Same arguments as horovodrun (a
# -hostfile, in OpenMPI's format, reaches it as -H); see --help. Logic in
# horovod_train/launch/horovodrun.py and hosts.py.
set -euo pipefail
exec "$(dirname "$0")/python.sh" -m horovod_train launch "$@"
