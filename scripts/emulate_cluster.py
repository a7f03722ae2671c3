"""Two (or more) hosts on one machine, for running horovodrun across "nodes"
without a cluster: each host is a network namespace on a private bridge with
its own address, hostname, /etc/hosts and /etc/ssh, and an sshd on the
cluster's port that accepts the cluster's key only.

Run it through scripts/emulate_cluster.sh (needs root):

    up [--hosts a,b]        create the hosts and start their sshd
    exec HOST -- CMD...     run CMD as if logged in on HOST (same files, cwd, env)
    status                  show the hosts
    down                    stop everything and remove all state

Why hostnames matter: Horovod's Gloo rendezvous resolves each host's own
hostname, so every emulated host needs a name that resolves to its address,
as on a real cluster. The namespaces have no default route: they reach each
other and nothing else.
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
STATE_DIR = Path(os.environ.get("EMULATE_STATE_DIR", "/run/horovod-train-cluster"))
BRIDGE = "hvtbr0"
NETNS_PREFIX = "hvt-"
DEFAULT_SUBNET = "10.213.0"  # /24, private and unlikely to clash; EMULATE_SUBNET overrides
SSH_PORT = 12345


class ClusterError(Exception):
    pass


def sh(*command: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(command)}: {result.stderr.strip() or result.returncode}")
    return result


def netns(host: str) -> str:
    return NETNS_PREFIX + host


def enter_command(host: str, state: Path, command: list[str]) -> list[str]:
    """argv that runs `command` inside HOST: its network namespace, a private
    mount namespace with its /etc/hosts and /etc/ssh bound in, its hostname.
    nsenter --net rather than `ip netns exec`, which remounts /sys (and
    breaks programs that need the host's cgroup tree, such as slurmd)."""
    host_dir = state / "hosts" / host
    setup = (
        f"mount --bind {host_dir}/hosts /etc/hosts && "
        f"mount --bind {host_dir}/ssh /etc/ssh && "
        f"hostname {host} && exec \"$@\""
    )
    return ["nsenter", f"--net=/run/netns/{netns(host)}", "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-c", setup, "sh", *command]


def load_layout(state: Path) -> dict:
    try:
        return json.loads((state / "cluster.json").read_text())
    except (OSError, ValueError):
        raise ClusterError(f"no emulated cluster is up ({state}/cluster.json missing); "
                           "run: scripts/emulate_cluster.sh up") from None


def check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise ClusterError("needs root (network namespaces, bind mounts)")
    for tool in ("ip", "nsenter", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise ClusterError(f"{tool} not found (scripts/setup.sh installs it)")
    if not Path("/usr/sbin/sshd").exists():
        raise ClusterError("/usr/sbin/sshd not found: install openssh-server "
                           "(scripts/setup.sh does)")


def up(hosts: list[str], subnet: str, port: int, state: Path) -> dict:
    check_prerequisites()
    down(state, quiet=True)
    state.mkdir(parents=True, mode=0o755)
    addresses = {host: f"{subnet}.{11 + i}" for i, host in enumerate(hosts)}
    layout = {"hosts": addresses, "bridge": BRIDGE, "bridge_address": f"{subnet}.1",
              "port": port, "state_dir": str(state)}
    (state / "cluster.json").write_text(json.dumps(layout, indent=2) + "\n")

    keys = state / "keys"
    sh(str(SCRIPTS / "cluster_keys.sh"), str(keys))
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{subnet}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")

    hosts_file = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    hosts_file += f"{subnet}.1\tctl\n"
    hosts_file += "".join(f"{address}\t{host}\n" for host, address in addresses.items())
    known_hosts = []
    for host, address in addresses.items():
        host_dir = state / "hosts" / host
        ssh_dir = host_dir / "ssh"
        ssh_dir.mkdir(parents=True, mode=0o755)
        (host_dir / "hosts").write_text(hosts_file)
        # Host keys are made when the host comes up, never shared between hosts.
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"host-{host}",
           "-f", str(ssh_dir / "ssh_host_ed25519_key"))
        public = (ssh_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        known_hosts.append(f"[{host}]:{port},[{address}]:{port} {' '.join(public)}\n")
        shutil.copy(keys / "authorized_keys", ssh_dir / "authorized_keys")
        (ssh_dir / "sshd_config").write_text(sshd_config(port))

        ns = netns(host)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"{ns}0", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", f"{ns}0", "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")

    client = ssh_client_config(list(addresses) + list(addresses.values()), port,
                               keys / "id_ed25519")
    for host in addresses:
        ssh_dir = state / "hosts" / host / "ssh"
        (ssh_dir / "ssh_known_hosts").write_text("".join(known_hosts))
        (ssh_dir / "ssh_config").write_text(client)

    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    for host in addresses:
        log = state / "hosts" / host / "sshd.log"
        sh(*enter_command(host, state, ["/usr/sbin/sshd", "-E", str(log)]))
    wait_for_ssh(list(addresses), state)
    return layout


def sshd_config(port: int) -> str:
    return f"""\
# sshd of an emulated host: the cluster's key only, on the cluster's port.
Port {port}
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /etc/ssh/sshd.pid
AuthorizedKeysFile /etc/ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
PermitRootLogin prohibit-password
UsePAM no
StrictModes yes
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
# horovodrun and mpirun open several connections at once.
MaxStartups 64:30:128
MaxSessions 64
"""


def ssh_client_config(names: list[str], port: int, identity: Path) -> str:
    return f"""\
# ssh client of an emulated host: cluster hosts on the cluster's port with
# the cluster's key, checked against the cluster's host keys.
Host {' '.join(names)}
    Port {port}
    User root
    IdentityFile {identity}
    IdentitiesOnly yes
    GlobalKnownHostsFile /etc/ssh/ssh_known_hosts
    UserKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
"""


def wait_for_ssh(hosts: list[str], state: Path, timeout_s: float = 30.0) -> None:
    """Every host must reach every host by ssh before `up` reports success."""
    deadline = time.monotonic() + timeout_s
    for source in hosts:
        for target in hosts:
            while True:
                result = subprocess.run(enter_command(source, state, ["ssh", target, "true"]),
                                        capture_output=True, text=True, timeout=30)
                if result.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(f"ssh from {source} to {target} failed: "
                                       f"{result.stderr.strip()}")
                time.sleep(0.3)


def down(state: Path, quiet: bool = False) -> None:
    """Kill every process in the hosts' namespaces, delete namespaces, bridge
    and state. Works on a half-built cluster too."""
    listing = sh("ip", "netns", "list", check=False).stdout.splitlines()
    namespaces = [line.split()[0] for line in listing if line.startswith(NETNS_PREFIX)]
    for ns in namespaces:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while pids and time.monotonic() < deadline:
                pids = [p for p in pids if Path(f"/proc/{p}").exists()]
                time.sleep(0.1)
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    if state.exists():
        shutil.rmtree(state)
    if not quiet:
        print(f"emulate_cluster: down ({len(namespaces)} hosts removed)")


def status(state: Path) -> None:
    layout = load_layout(state)
    for host, address in layout["hosts"].items():
        alive = sh("ip", "netns", "pids", netns(host), check=False).stdout.split()
        print(f"{host}\t{address}\tport {layout['port']}\t{len(alive)} processes")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="emulate_cluster.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="create the hosts and start sshd on each")
    start.add_argument("--hosts", default="a,b", help="comma-separated host names")
    start.add_argument("--subnet", default=os.environ.get("EMULATE_SUBNET", DEFAULT_SUBNET),
                       help="first three octets of the private /24 for the hosts")
    start.add_argument("--ssh-port", type=int, default=SSH_PORT)
    run = commands.add_parser("exec", help="run a command on one host")
    run.add_argument("host")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    commands.add_parser("status", help="list the hosts")
    commands.add_parser("down", help="remove the hosts and all state")
    args = parser.parse_args(argv)

    if args.command == "up":
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        if len(set(hosts)) != len(hosts) or not all(h.isalnum() and len(h) <= 8 for h in hosts):
            raise ClusterError(f"--hosts wants distinct short alphanumeric names, got {args.hosts}")
        layout = up(hosts, args.subnet, args.ssh_port, STATE_DIR)
        print(f"emulate_cluster: up: {', '.join(f'{h}={a}' for h, a in layout['hosts'].items())}"
              f", sshd on port {layout['port']}; run commands with: "
              f"scripts/emulate_cluster.sh exec {hosts[0]} -- COMMAND")
    elif args.command == "exec":
        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        layout = load_layout(STATE_DIR)
        if args.host not in layout["hosts"]:
            raise ClusterError(f"no host {args.host!r}; hosts are {', '.join(layout['hosts'])}")
        if not command:
            raise ClusterError("exec needs a command: exec HOST -- COMMAND")
        argv_ = enter_command(args.host, STATE_DIR, command)
        os.execvp(argv_[0], argv_)
    elif args.command == "status":
        status(STATE_DIR)
    else:
        down(STATE_DIR)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ClusterError as err:
        print(f"emulate_cluster: error: {err}", file=sys.stderr)
        sys.exit(1)
