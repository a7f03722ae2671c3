"""The ssh client's config between a cluster's hosts: the cluster's port,
user and key, host keys checked, batch mode and the keepalive; with the
cluster's host key, the known_hosts that names it for each host. One file for
the two places that write it: the image's entrypoint (docker/entrypoint.sh
runs this file as a script, before any of the project is in the container)
and the emulated hosts (horovod_train/emulation/cluster.py, which imports
this file through a link in the package). Standard library only.

    python3 ssh_client.py --port 12345 --user hvt --identity /run/hvt-ssh/id_ed25519 \\
        --known-hosts /run/hvt-ssh/known_hosts --host-key KEYS/ssh_host_ed25519_key.pub a b
"""

import argparse
import getpass
import sys
from pathlib import Path

SSH_DEFAULT_PORT = 22
CHECKING = ("yes", "accept-new")


def known_host_name(name: str, port: int) -> str:
    """A host's name in known_hosts, as ssh looks it up: bare on port 22,
    [name]:port on any other."""
    return name if port == SSH_DEFAULT_PORT else f"[{name}]:{port}"


def known_hosts(names: list[str], port: int, public_key: str) -> str:
    """One known_hosts line: the cluster's host key (`public_key`, a .pub
    file's text) for each of the names, and no other key for them."""
    key_type, key = public_key.split()[:2]
    return f"{','.join(known_host_name(name, port) for name in names)} {key_type} {key}\n"


def config(names: list[str], port: int, identity: str, known_hosts: str,
           checking: str = "yes", global_known_hosts: str | None = None,
           quiet: bool = False, user: str = "root") -> str:
    """The `Host` block for the cluster's names. On ssh's default port no
    Port line: ssh's own default reaches the hosts, and a -p given wins, as
    on bare hosts. `checking`: `yes` where every host key is known
    beforehand, `accept-new` to learn a new one (a changed one is still
    refused). `user`: the one every host's sshd runs as and lets in."""
    if checking not in CHECKING:
        raise ValueError(f"checking must be one of {', '.join(CHECKING)}, got {checking!r}")
    port_line = "" if port == SSH_DEFAULT_PORT else f"    Port {port}\n"
    global_line = (f"    GlobalKnownHostsFile {global_known_hosts}\n"
                   if global_known_hosts else "")
    log_line = "    LogLevel ERROR\n" if quiet else ""
    return f"""\
# The cluster's hosts: its port and key; host keys are checked.
Host {' '.join(names)}
{port_line}    User {user}
    IdentityFile {identity}
    IdentitiesOnly yes
{global_line}    UserKnownHostsFile {known_hosts}
    StrictHostKeyChecking {checking}
    BatchMode yes
    ConnectTimeout 10
    # A host that stops answering (its link down) ends the ssh sessions to it
    # within 45-60 s, and with them an elastic driver's wait for the workers
    # there (TCP alone would wait for hours). After the limits that name what
    # was lost: mpirun's keepalive (docker/openmpi-mca-params.conf, 25 s; a
    # dead ssh would read as a daemon that failed to start) and Gloo's 30 s
    # timeout (a dead ssh would end the job without the trainer's line).
    ServerAliveInterval 15
    ServerAliveCountMax 4
{log_line}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ssh_client", description="Print the ssh client config for a cluster's hosts.")
    parser.add_argument("names", nargs="+", help="the cluster's host names")
    parser.add_argument("--port", type=int, default=SSH_DEFAULT_PORT, help="their sshd's port")
    parser.add_argument("--user", default=getpass.getuser(),
                        help="the user to log in as (default: the one running this)")
    parser.add_argument("--identity", required=True, help="the cluster's private key")
    parser.add_argument("--known-hosts", required=True, help="the known_hosts file to check")
    parser.add_argument("--checking", choices=CHECKING, default="yes",
                        help="StrictHostKeyChecking (default: yes)")
    parser.add_argument("--host-key", metavar="PUB",
                        help="the cluster's public host key: written to --known-hosts for "
                             "every name, and no new key is ever accepted")
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error(f"--port must be 1-65535, got {args.port}")
    if not args.user or args.user.startswith("-") or any(c.isspace() for c in args.user):
        parser.error(f"--user must be a user name, got {args.user!r}")
    checking = args.checking
    if args.host_key:
        try:
            line = known_hosts(args.names, args.port, Path(args.host_key).read_text())
        except (OSError, ValueError) as err:
            parser.error(f"--host-key {args.host_key}: {getattr(err, 'strerror', None) or err}")
        Path(args.known_hosts).write_text(line)
        checking = "yes"
    sys.stdout.write(config(args.names, args.port, args.identity, args.known_hosts, checking,
                            user=args.user))
    return 0


if __name__ == "__main__":
    sys.exit(main())
