#!/usr/bin/env bash
# Start the training image on real hosts (docker over ssh) and run horovodrun
# from the first; see --help. Logic in horovod_train/launch/containers.py.
set -euo pipefail
exec "$(dirname "$0")/python.sh" -m horovod_train launch-cluster "$@"
