#!/usr/bin/env bash
# Container start: check the NVIDIA driver against the image's CUDA, install
# the cluster's keys from a mounted directory (its host key too, so that ssh
# between the containers knows each one before it connects), start sshd on
# the cluster's port, then run the given command. No key is in the image.
# It runs as the image's user (hvt, unprivileged) or as root: sshd lets in
# the user it runs as, and ssh logs in as that user.
#
#   HVT_KEYS_DIR       where the cluster's keys are mounted (default
#                      /etc/horovod/keys): scripts/cluster_keys.sh's output
#                      (id_ed25519, authorized_keys, ssh_host_ed25519_key(.pub),
#                      or a known_hosts of the site's in place of the host
#                      key), or the Kubeflow MPI Operator's per-job key
#                      (id_rsa, id_rsa.pub, authorized_keys), which is then
#                      the hosts' key too: only the job's pods hold it
#   HVT_CLUSTER_HOSTS  the cluster's host names, space-separated: the names
#                      the cluster's host key is known by
#   HVT_SSH_PORT       sshd's port (default 12345)
#   HVT_SSH_USER       the user ssh logs in as (default: the user this runs as)
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
# ssh its config (docker/ssh_config includes it). The image makes it the
# image user's; sshd takes keys only from its own user's directory, so root
# takes it over.
ssh_dir=/run/hvt-ssh
fail() { echo "entrypoint: error: $*" >&2; exit 2; }
# sshd lets in only a user of /etc/passwd: a uid the image does not know
# (Kubernetes' runAsUser, OpenShift's) has none.
user=$(id -un 2>/dev/null) \
  || fail "uid $(id -u) is no user of the image: run as its user (uid 1000) or as root, or build it with --build-arg HVT_UID=$(id -u)"
install -d -o "$(id -u)" -g "$(id -g)" -m 700 "$ssh_dir" 2>/dev/null \
  || fail "cannot make $ssh_dir as $user (uid $(id -u)): it must be this user's own directory (the image makes it for uid 1000; run as that uid or as root)"

# Copies a mounted key file into $ssh_dir, or says in one line why it cannot:
# a file of another uid with mode 600 is unreadable to the image's user.
take() {
  install -m "$3" "$1" "$2" 2>/dev/null \
    || fail "cannot read $1 as $user (uid $(id -u)): make the keys readable by this uid (chown $(id -u) on the host) or run the container as their owner"
}

# The Kubeflow MPI Operator's per-job key (an ECDSA key it makes for each
# job and deletes with it) serves as user key and host key at once.
if [[ -f "$keys/id_rsa" && ! -f "$keys/id_ed25519" ]]; then
  identity=id_rsa host_key_pub="$keys/id_rsa.pub"
  take "$keys/id_rsa" "$ssh_dir/ssh_host_key" 600
else
  identity=id_ed25519 host_key_pub="$keys/ssh_host_ed25519_key.pub"
  if [[ -f "$keys/ssh_host_ed25519_key" ]]; then
    take "$keys/ssh_host_ed25519_key" "$ssh_dir/ssh_host_key" 600
  elif [[ ! -f "$ssh_dir/ssh_host_key" ]]; then
    # Keys made before the cluster had a host key: one of this container's own
    # (never at build time, so no two containers share one).
    ssh-keygen -q -t ed25519 -N '' -C "host-$(hostname)" -f "$ssh_dir/ssh_host_key"
  fi
fi

if [[ -f "$keys/authorized_keys" ]]; then
  take "$keys/authorized_keys" "$ssh_dir/authorized_keys" 600
  [[ -f "$keys/$identity" ]] && take "$keys/$identity" "$ssh_dir/$identity" 600
  known=()
  if [[ -f "$keys/known_hosts" ]]; then
    take "$keys/known_hosts" "$ssh_dir/known_hosts" 644
    known=(--checking yes)
  elif [[ -f "$host_key_pub" ]]; then
    known=(--host-key "$host_key_pub")  # known_hosts: that key, no other
  else
    echo "entrypoint: no cluster host key in $keys (scripts/cluster_keys.sh makes one): ssh takes each container's key the first time it meets it" >&2
    known=(--checking accept-new)
  fi
  if [[ -n "${HVT_CLUSTER_HOSTS:-}" ]]; then
    # The same config as the emulated hosts' (docker/env/ssh_client.py), for
    # each name of the list (split on spaces, never expanded as a pattern).
    read -ra cluster_hosts <<< "$HVT_CLUSTER_HOSTS"
    /opt/venv/bin/python /opt/horovod-env/ssh_client.py --port "$port" \
      --user "${HVT_SSH_USER:-$user}" --identity "$ssh_dir/$identity" \
      --known-hosts "$ssh_dir/known_hosts" "${known[@]}" -- "${cluster_hosts[@]}" \
      > "$ssh_dir/config"
    chmod 600 "$ssh_dir/config"
  else
    echo "entrypoint: HVT_CLUSTER_HOSTS is empty: ssh will refuse hosts it does not know" >&2
  fi
  # As root, sshd separates its privileges into an empty directory of its
  # own; an unprivileged sshd cannot, and lets in its own user alone. No pid
  # file: it runs in the foreground.
  if [[ $(id -u) == 0 ]]; then mkdir -p /run/sshd; fi
  # In the foreground of a process of its own (-D), logging to the
  # container's output (-e): each login, each refusal. What follows starts
  # once it listens.
  /usr/sbin/sshd -D -e -p "$port" -h "$ssh_dir/ssh_host_key" -o PidFile=none &
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
