#!/usr/bin/env bash
# Build the training image (docker/Dockerfile), GPU or CPU, and the image
# that carries the code, with podman, offline but for Debian's and PyPI's
# mirrors; see --help. Logic in horovod_train/image/build.py.
set -euo pipefail
exec "$(dirname "$0")/python.sh" -m horovod_train build-image "$@"
