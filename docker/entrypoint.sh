#!/usr/bin/env bash
# Container start: check the NVIDIA driver against the image's CUDA, install
# the cluster's keys from a mounted directory (its host key too, so that ssh
# between the containers knows each one before it connects), start sshd on
# the cluster's port, then run the given command. No key is in the image.
#
#   HVT_KEYS_DIR       where scripts/cluster_keys.sh's output is mounted
#                      (default /etc/horovod/keys): id_ed25519,
#                      authorized_keys, ssh_host_ed25519_key(.pub), or a
#                      known_hosts of the site's in place of the host key
#   HVT_CLUSTER_HOSTS  the cluster's host names, space-separated: the names
#                      the cluster's host key is known by
#   HVT_SSH_PORT       sshd's port (default 12345)
#
# The full list of the project's settings: docs/settings.md.
set -euo pipefail

keys=${HVT_KEYS_DIR:-/etc/horovod/keys}
port=${HVT_SSH_PORT:-12345}

# First, whether the host's NVIDIA driver runs the image's CUDA: one line
# naming both, instead of torch quietly finding no GPU.
/opt/venv/bin/python /opt/horovod-env/check_driver.py

# Every ssh file of the cluster's lives here, and nowhere else: no home is
# written (under Apptainer, root's home may be the user's own, shared one).
# sshd reads its host key (-h, below) and the authorized keys here (docker/sshd_config),
# ssh its config (docker/ssh_config includes it).
ssh_dir=/run/hvt-ssh
install -d -m 700 "$ssh_dir"

if [[ -f "$keys/ssh_host_ed25519_key" ]]; then
  install -m 600 "$keys/ssh_host_ed25519_key" "$ssh_dir/ssh_host_ed25519_key"
elif [[ ! -f "$ssh_dir/ssh_host_ed25519_key" ]]; then
  # Keys made before the cluster had a host key: one of this container's own
  # (never at build time, so no two containers share one).
  ssh-keygen -q -t ed25519 -N '' -C "host-$(hostname)" -f "$ssh_dir/ssh_host_ed25519_key"
fi

if [[ -f "$keys/authorized_keys" ]]; then
  install -m 600 "$keys/authorized_keys" "$ssh_dir/authorized_keys"
  [[ -f "$keys/id_ed25519" ]] && install -m 600 "$keys/id_ed25519" "$ssh_dir/id_ed25519"
  known=()
  if [[ -f "$keys/known_hosts" ]]; then
    install -m 644 "$keys/known_hosts" "$ssh_dir/known_hosts"
    known=(--checking yes)
  elif [[ -f "$keys/ssh_host_ed25519_key.pub" ]]; then
    known=(--host-key "$keys/ssh_host_ed25519_key.pub")  # known_hosts: that key, no other
  else
    echo "entrypoint: no cluster host key in $keys (scripts/cluster_keys.sh makes one): ssh takes each container's key the first time it meets it" >&2
    known=(--checking accept-new)
  fi
  if [[ -n "${HVT_CLUSTER_HOSTS:-}" ]]; then
    # The same config as the emulated hosts' (docker/env/ssh_client.py), for
    # each name of the list (split on spaces, never expanded as a pattern).
    read -ra cluster_hosts <<< "$HVT_CLUSTER_HOSTS"
    /opt/venv/bin/python /opt/horovod-env/ssh_client.py --port "$port" \
      --identity "$ssh_dir/id_ed25519" --known-hosts "$ssh_dir/known_hosts" \
      "${known[@]}" -- "${cluster_hosts[@]}" > "$ssh_dir/config"
    chmod 600 "$ssh_dir/config"
  else
    echo "entrypoint: HVT_CLUSTER_HOSTS is empty: ssh will refuse hosts it does not know" >&2
  fi
  mkdir -p /run/sshd
  # In the foreground of a process of its own (-D), logging to the
  # container's output (-e): each login, each refusal. What follows starts
  # once it listens.
  /usr/sbin/sshd -D -e -p "$port" -h "$ssh_dir/ssh_host_ed25519_key" &
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
else
  echo "entrypoint: no $keys/authorized_keys (mount the output of scripts/cluster_keys.sh there): sshd not started" >&2
fi

# The image is the environment; the trainers come from the checkout.
if [[ ! -d /workspace/horovod_train ]]; then
  echo "entrypoint: /workspace has no horovod_train/: mount the checkout there (docker run -v \"\$PWD\":/workspace ...)" >&2
fi

exec "$@"
