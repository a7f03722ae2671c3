#!/usr/bin/env bash
# Start the training image on real hosts (docker over ssh) and run horovodrun
# from the first; see --help. Logic in launch_cluster.py.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/launch_cluster.py" "$@"
