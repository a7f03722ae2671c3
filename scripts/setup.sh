#!/usr/bin/env bash
# Set up this checkout: the environment recipe (docker/env/setup.sh, which
# the image's builder runs too) into .venv, with the test tools and this
# project installed editable. Safe to run again: it only does what is missing.
set -euo pipefail

case "${1:-}" in
  -h|--help)
    cat <<'USAGE'
Usage: scripts/setup.sh [--frameworks LIST] [--gpu-ops auto|nccl|none] [--cuda-archs LIST] [--cuda 13|12] [--keras 3|2] [--venv DIR] [--no-apt]

Runs docker/env/setup.sh --venv .venv --dev --editable . with these options
(see docker/env/setup.sh --help); --venv DIR replaces .venv.
USAGE
    exit 0 ;;
esac

cd "$(dirname "$0")/.."
exec docker/env/setup.sh --venv .venv --dev --editable . "$@"
