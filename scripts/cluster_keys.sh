#!/usr/bin/env bash
# Make the SSH keys of one cluster: the user key the nodes trust and the
# host key every node answers with, so that ssh between nodes knows each
# node before the first connection and takes no other. The private keys must
# reach only the nodes (a mounted directory or a secret), never an image.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/cluster_keys.sh DIR [--force]

Writes into DIR (created with mode 700):
  id_ed25519        the cluster's private key (mode 600)
  id_ed25519.pub    its public key
  authorized_keys   the public key, restricted to running commands (no
                    forwarding, no pty), for the nodes' sshd
  ssh_host_ed25519_key      the cluster's host key (mode 600): every node's
                            sshd answers with it
  ssh_host_ed25519_key.pub  its public key, which ssh between the nodes
                            accepts and no other
Refuses to replace existing keys unless --force is given.
EOF
}

dir=""
force=0
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --force) force=1 ;;
    -*) echo "cluster_keys.sh: error: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) [[ -z "$dir" ]] || { echo "cluster_keys.sh: error: one DIR only" >&2; exit 2; }; dir="$arg" ;;
  esac
done
[[ -n "$dir" ]] || { usage >&2; exit 2; }

if [[ -e "$dir/id_ed25519" && $force -eq 0 ]]; then
  echo "cluster_keys.sh: error: $dir/id_ed25519 exists; pass --force to replace it" >&2
  exit 2
fi
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
rm -f "$dir/id_ed25519" "$dir/id_ed25519.pub" "$dir/ssh_host_ed25519_key" \
  "$dir/ssh_host_ed25519_key.pub"
ssh-keygen -q -t ed25519 -N '' -C "horovod-cluster-$(date +%Y%m%d)" -f "$dir/id_ed25519"
ssh-keygen -q -t ed25519 -N '' -C "horovod-cluster-host-$(date +%Y%m%d)" \
  -f "$dir/ssh_host_ed25519_key"
printf 'restrict %s\n' "$(cat "$dir/id_ed25519.pub")" > "$dir/authorized_keys"
chmod 600 "$dir/id_ed25519" "$dir/authorized_keys" "$dir/ssh_host_ed25519_key"
chmod 644 "$dir/id_ed25519.pub" "$dir/ssh_host_ed25519_key.pub"
echo "cluster_keys.sh: wrote $dir/{id_ed25519,id_ed25519.pub,authorized_keys,ssh_host_ed25519_key,ssh_host_ed25519_key.pub}"
