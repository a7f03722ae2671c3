#!/usr/bin/env bash
# Host discovery for elastic runs: prints HOST:SLOTS for each host listed in
# the hosts file that operators edit ($HVT_ELASTIC_HOSTS_FILE, default
# hostfiles/elastic). Give it to horovodrun --host-discovery-script.
set -euo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<'USAGE'
Usage: HVT_ELASTIC_HOSTS_FILE=FILE scripts/discover_hosts.sh

Prints one HOST:SLOTS line per `HOST slots=N` line of FILE (default
hostfiles/elastic of this checkout; blank lines and # comments allowed).
Remove a host from FILE to take it out of a running elastic job, add it back
to bring it in (a host whose ranks failed comes back after a cooldown,
docs/elastic-and-failures.md):

  scripts/launch.sh -np 4 --min-np 2 --max-np 4 \
      --host-discovery-script scripts/discover_hosts.sh \
      python horovod_train/pytorch_mnist.py --elastic
USAGE
  exit 0
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hosts_file="${HVT_ELASTIC_HOSTS_FILE:-$repo/hostfiles/elastic}"
exec "$repo/scripts/python.sh" -m horovod_train discover-hosts "$hosts_file"
