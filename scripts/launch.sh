#!/usr/bin/env bash
# horovodrun with its input checked first: host list or hostfile, slots, -np,
# and every remote host's name, SSH port and ssh login, each problem one line
# and exit 2 before anything starts. Same arguments as horovodrun (a
# -hostfile, in OpenMPI's format, reaches it as -H); see --help. Logic in
# horovod_train/launch/horovodrun.py and hosts.py.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
# The project's environment when there is one (a checkout after setup.sh),
# else the python on PATH (the image's).
python="${PYTHON:-python3}"
if [[ -z "${PYTHON:-}" && -x "$repo/.venv/bin/python" ]]; then
  python="$repo/.venv/bin/python"
fi
exec "$python" "$repo/horovod_train/launch/horovodrun.py" "$@"
