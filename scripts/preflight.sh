#!/usr/bin/env bash
# The job's hosts checked before the job: ssh, the checkout, Python and
# Horovod build on every host, GPUs, /dev/shm, disk, clocks, every pair's
# link on the job's network and an allreduce over its ranks; a table, one
# line per culprit, exit 1 when there is one. See --help. Logic in
# horovod_train/launch/preflight.py.
set -euo pipefail
exec "$(dirname "$0")/python.sh" -m horovod_train preflight "$@"
