#!/usr/bin/env bash
# How long setting up takes: a cold clone, the same setup again, a second
# clone's demo, a cold demo; one or more commits side by side, JSON and a
# table in --out-dir. See --help. Logic in benchmarks/setup_times.py.
set -euo pipefail
exec "$(dirname "$0")/../scripts/python.sh" -m benchmarks.setup_times "$@"
