#!/usr/bin/env bash
# Build the training image (docker/Dockerfile): the CPU variant with podman,
# offline but for Debian's and PyPI's mirrors; see --help. Logic in
# build_image.py.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/build_image.py" "$@"
