#!/usr/bin/env bash
# Build Horovod from its sdist with the project's patches, cache the wheel
# outside the checkout (keyed by everything that went into it), install it.
# The logic lives in build_horovod.py (standard library only, run by $HVT_PYTHON
# or python3); see --help.
set -euo pipefail
exec "${HVT_PYTHON:-python3}" "$(dirname "$0")/build_horovod.py" "$@"
