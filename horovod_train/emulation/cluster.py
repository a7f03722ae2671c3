"""Two (or more) hosts on one machine, for running horovodrun across "nodes"
without a cluster: each host is a network namespace on a private bridge with
its own address, hostname and /etc/hosts, and an sshd that accepts the
cluster's key only.

Two kinds of host:
  - plain (default): bare hosts, the machine's own files and programs, with
    the host's /etc/hosts and /etc/ssh bound in; sshd runs with
    docker/sshd_config on ssh's default port, 22, and the hosts' ssh client
    config names no port, so ssh reaches them as it reaches bare hosts:
    no -p needed (the rule: launch/hosts.py);
  - image (--image IMAGE): a container of the training image without a
    container runtime: the image's root filesystem (podman image mount)
    under a writable overlay per host, entered with chroot, started by the
    image's own entrypoint, which makes the host key and starts its sshd on
    the image's port (launch/hosts.py's IMAGE_SSH_PORT).
--ssh-port moves either kind's sshd; plain hosts' client config then names
that port for the cluster's hosts, as a site's ssh_config would.

Run it through scripts/emulate_cluster.sh (needs root):

    up [--hosts a,b] [--image IMAGE [--mount SRC:DST[:ro]]...] [--decoys]
       [--routed] [--second-network RATE]
                            create the hosts and start their sshd
    exec HOST -- CMD...     run CMD as if logged in on HOST (cwd and env kept
                            for plain hosts; the image's WORKDIR and ENV for
                            image hosts)
    status                  show the hosts (and the link's shaping)
    shape --rate 1gbit [--delay 1ms] | --off
                            limit every host's link (tc: tbf for the rate,
                            netem for a delay where the kernel has it)
    down                    stop everything and remove all state

Why hostnames matter: Horovod's Gloo rendezvous resolves each host's own
hostname, so every emulated host needs a name that resolves to its address,
as on a real cluster. The namespaces have no default route: they reach each
other and nothing else.

--decoys gives every host, besides eth0 (the network that joins them), the
interfaces that lead multi-host jobs astray on real hosts (DECOYS below).
--routed puts every host after the first on a subnet of its own (the next
/24), behind a router namespace, as racks or cloud subnets are. With
--second-network RATE every host also has eth2, on a second bridge and
subnet (the second octet plus one), limited to RATE each way (tc tbf): a
slow network beside the fast one.
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

from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.emulation import ssh_client
from horovod_train.launch.hosts import IMAGE_SSH_PORT

REPO = Path(__file__).resolve().parents[2]  # the checkout
SSHD_CONFIG = REPO / "docker" / "sshd_config"
STATE_DIR = Path(os.environ.get("HVT_EMULATE_STATE_DIR", "/run/horovod-train-cluster"))
BRIDGE = "hvtbr0"
ROUTED_BRIDGE = "hvtbr1"  # --routed: the subnet of every host after the first
SECOND_BRIDGE = "hvtbr2"  # --second-network
ROUTER = "router"  # --routed: the namespace hvt-router joins the two subnets
ROUTER_HOST_OCTET = 254
NETNS_PREFIX = "hvt-"
DEFAULT_SUBNET = "10.213.0"  # /24, private and unlikely to clash; HVT_EMULATE_SUBNET overrides
SSH_DEFAULT_PORT = ssh_client.SSH_DEFAULT_PORT  # where plain hosts' sshd listens, as on bare hosts
# The decoys of `up --decoys`, each up with a carrier and an IPv4 address.
# Only eth0 joins the hosts.
DECOYS = {
    "docker0": "Docker's bridge: the same address on every host (172.17.0.1/16), a "
               "container's port on it",
    "mgmt0": "a management network: each host on a subnet of its own (192.168.20N.0/24)",
    "eth1": "a second network, the same subnet on every host (192.168.200.0/24), joining "
            "none of them: unplugged, or firewalled",
}


def sh(*command: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise RunFailed(f"{' '.join(command)}: {detail}")
    return result


def netns(host: str) -> str:
    return NETNS_PREFIX + host


def enter_command(host: str, state: Path, command: list[str]) -> list[str]:
    """argv that runs `command` inside HOST: its network namespace and its
    hostname; then, for a plain host, a private mount namespace with its
    /etc/hosts and /etc/ssh bound in, for an image host a chroot into its root
    with the image's environment and working directory. nsenter --net rather
    than `ip netns exec`, which remounts /sys (and breaks programs that need
    the host's cgroup tree, such as slurmd)."""
    host_dir = state / "hosts" / host
    enter = ["nsenter", f"--net=/run/netns/{netns(host)}", "unshare", "--uts"]
    image = load_layout(state).get("image")
    if image:
        user = image.get("user", {"uid": 0, "gid": 0, "home": "/root"})
        env = [*image["env"], f"HOME={user['home']}",
               f"HVT_CLUSTER_HOSTS={' '.join(image['hosts'])}", f"HVT_SSH_PORT={image['port']}"]
        return [*enter, "sh", "-c", f"hostname {host} && exec \"$@\"", "sh",
                "chroot", f"--userspec={user['uid']}:{user['gid']}", "--groups=",
                str(host_dir / "root"), "/usr/bin/env", "-i", *env,
                "/bin/sh", "-c", f"cd {image['workdir']} && exec \"$@\"", "sh", *command]
    setup = (
        f"mount --bind {host_dir}/hosts /etc/hosts && "
        f"mount --bind {host_dir}/ssh /etc/ssh && "
        f"hostname {host} && exec \"$@\""
    )
    return [*enter, "--mount", "--propagation", "private", "sh", "-c", setup, "sh", *command]


def load_layout(state: Path) -> dict:
    try:
        return json.loads((state / "cluster.json").read_text())
    except (OSError, ValueError):
        raise UserError(f"no emulated cluster is up ({state}/cluster.json missing); "
                        "run: scripts/emulate_cluster.sh up") from None


def check_prerequisites(image: str | None) -> None:
    if os.geteuid() != 0:
        raise UserError("needs root (network namespaces, bind mounts)")
    if image:
        if shutil.which("podman") is None:
            raise UserError("--image needs podman (apt-get install podman)")
        if sh("podman", "image", "exists", image, check=False).returncode != 0:
            raise UserError(f"no image {image} (scripts/build_image.sh builds one)")
        return
    for tool in ("ip", "nsenter", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} not found (scripts/setup.sh installs it)")
    if not Path("/usr/sbin/sshd").exists():
        raise UserError("/usr/sbin/sshd not found: install openssh-server "
                        "(scripts/setup.sh does)")


def next_subnet(subnet: str, octet: int) -> str:
    """"10.213.0" with its `octet`-th octet (1 or 2) plus one."""
    parts = [int(part) for part in subnet.split(".")]
    parts[octet] += 1
    if parts[octet] > 255:
        raise UserError(f"--subnet {subnet}: no room for the next subnet")
    return ".".join(map(str, parts))


def sshd_port(port: int | None, image: str | None) -> int:
    """The hosts' sshd port: the one asked for, else the image's for image
    hosts and ssh's default for plain ones."""
    if port is not None:
        return port
    return IMAGE_SSH_PORT if image else SSH_DEFAULT_PORT


def up(hosts: list[str], subnet: str, port: int | None, state: Path, image: str | None = None,
       mounts: list[tuple[Path, str, bool]] = (), decoys: bool = False, routed: bool = False,
       second_network: str | None = None) -> dict:
    check_prerequisites(image)
    port = sshd_port(port, image)
    if second_network:
        parse_rate(second_network)
    down(state, quiet=True)
    state.mkdir(parents=True, mode=0o755)
    routed_subnet = next_subnet(subnet, 2)
    subnets = {host: routed_subnet if routed and i else subnet for i, host in enumerate(hosts)}
    addresses = {host: f"{subnets[host]}.{11 + i}" for i, host in enumerate(hosts)}
    layout = {"hosts": addresses, "bridge": BRIDGE, "bridge_address": f"{subnet}.1",
              "port": port, "state_dir": str(state), "image": None,
              "decoys": list(DECOYS) if decoys else [], "routed": routed,
              "second_network": second_network}
    (state / "cluster.json").write_text(json.dumps(layout, indent=2) + "\n")

    keys = state / "keys"
    sh(str(REPO / "scripts" / "cluster_keys.sh"), str(keys))
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{subnet}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    if routed:
        add_router(subnet, routed_subnet)
    hosts_file = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    hosts_file += f"{subnet}.1\tctl\n"
    hosts_file += "".join(f"{address}\t{host}\n" for host, address in addresses.items())
    for index, (host, address) in enumerate(addresses.items()):
        (state / "hosts" / host).mkdir(parents=True, mode=0o755)
        (state / "hosts" / host / "hosts").write_text(hosts_file)
        ns = netns(host)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"{ns}0", "type", "veth", "peer", "name", "eth0", "netns", ns)
        on_own_subnet = subnets[host] != subnet
        sh("ip", "link", "set", f"{ns}0", "master", ROUTED_BRIDGE if on_own_subnet else BRIDGE,
           "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        if routed:
            other = subnet if on_own_subnet else routed_subnet
            sh("ip", "-n", ns, "route", "add", f"{other}.0/24", "via",
               f"{subnets[host]}.{ROUTER_HOST_OCTET}")
        if decoys:
            add_decoys(ns, index)
        if second_network:
            add_second_network(ns, index, next_subnet(subnet, 1), second_network)

    if image:
        layout["image"] = start_image_hosts(image, addresses, port, state, keys, mounts)
    else:
        start_plain_hosts(addresses, port, state, keys)
    wait_for_ssh(list(addresses), state)
    return layout


def add_router(subnet: str, routed_subnet: str) -> None:
    """Namespace hvt-router, forwarding between the first subnet (on BRIDGE)
    and the routed one (on ROUTED_BRIDGE); the controller's route to it."""
    ns = netns(ROUTER)
    sh("ip", "link", "add", ROUTED_BRIDGE, "type", "bridge")
    sh("ip", "link", "set", ROUTED_BRIDGE, "up")
    sh("ip", "netns", "add", ns)
    for side, (bridge, net) in enumerate(((BRIDGE, subnet), (ROUTED_BRIDGE, routed_subnet))):
        sh("ip", "link", "add", f"{ns}{side}", "type", "veth", "peer", "name", f"r{side}",
           "netns", ns)
        sh("ip", "link", "set", f"{ns}{side}", "master", bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{net}.{ROUTER_HOST_OCTET}/24", "dev", f"r{side}")
        sh("ip", "-n", ns, "link", "set", f"r{side}", "up")
    sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
    sh("ip", "route", "replace", f"{routed_subnet}.0/24", "via", f"{subnet}.{ROUTER_HOST_OCTET}")


def add_second_network(ns: str, index: int, subnet: str, rate: str) -> None:
    """eth2 in namespace `ns`, on SECOND_BRIDGE and `subnet`, at `rate`."""
    if sh("ip", "link", "show", SECOND_BRIDGE, check=False, quiet=True).returncode != 0:
        sh("ip", "link", "add", SECOND_BRIDGE, "type", "bridge")
        sh("ip", "link", "set", SECOND_BRIDGE, "up")
    sh("ip", "link", "add", f"{ns}2", "type", "veth", "peer", "name", "eth2", "netns", ns)
    sh("ip", "link", "set", f"{ns}2", "master", SECOND_BRIDGE, "up")
    sh("ip", "-n", ns, "addr", "add", f"{subnet}.{11 + index}/24", "dev", "eth2")
    sh("ip", "-n", ns, "link", "set", "eth2", "up")
    shape_host(ns, rate, None, device="eth2")


def add_decoys(ns: str, index: int) -> None:
    """DECOYS in namespace `ns`, of the index-th host. Each is one end of a
    veth pair whose other end stays in the host, so it has a carrier."""
    def linked(name: str, peer: str) -> None:
        sh("ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer)
        sh("ip", "-n", ns, "link", "set", peer, "up")

    sh("ip", "-n", ns, "link", "add", "docker0", "type", "bridge", "forward_delay", "0")
    sh("ip", "-n", ns, "addr", "add", "172.17.0.1/16", "dev", "docker0")
    # The far ends' names share no prefix with the decoys (NCCL_SOCKET_IFNAME
    # selects interfaces by prefix).
    linked("veth0c", "xveth0c")
    sh("ip", "-n", ns, "link", "set", "veth0c", "master", "docker0", "up")
    linked("mgmt0", "xmgmt0")
    sh("ip", "-n", ns, "addr", "add", f"192.168.{201 + index}.{11 + index}/24", "dev", "mgmt0")
    linked("eth1", "xeth1")
    sh("ip", "-n", ns, "addr", "add", f"192.168.200.{11 + index}/24", "dev", "eth1")
    for name in ("docker0", "mgmt0", "eth1"):
        sh("ip", "-n", ns, "link", "set", name, "up")


def start_plain_hosts(addresses: dict, port: int, state: Path, keys: Path) -> None:
    known_hosts = []
    for host, address in addresses.items():
        ssh_dir = state / "hosts" / host / "ssh"
        ssh_dir.mkdir(mode=0o755)
        # Host keys are made when the host comes up, never shared between hosts.
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"host-{host}",
           "-f", str(ssh_dir / "ssh_host_ed25519_key"))
        public = (ssh_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        names = ",".join(ssh_client.known_host_name(name, port) for name in (host, address))
        known_hosts.append(f"{names} {' '.join(public)}\n")
        shutil.copy(keys / "authorized_keys", ssh_dir / "authorized_keys")
    # The image's entrypoint writes the same config (ssh_client.py is its file).
    client = ssh_client.config(list(addresses) + list(addresses.values()), port,
                               str(keys / "id_ed25519"), known_hosts="/dev/null",
                               global_known_hosts="/etc/ssh/ssh_known_hosts", quiet=True)
    for host in addresses:
        ssh_dir = state / "hosts" / host / "ssh"
        (ssh_dir / "ssh_known_hosts").write_text("".join(known_hosts))
        (ssh_dir / "ssh_config").write_text(client)

    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    for host in addresses:
        log = state / "hosts" / host / "sshd.log"
        # The nodes' sshd_config, with this host's files in place of root's.
        sh(*enter_command(host, state, [
            "/usr/sbin/sshd", "-f", str(SSHD_CONFIG), "-p", str(port), "-E", str(log),
            "-h", "/etc/ssh/ssh_host_ed25519_key",
            "-o", "AuthorizedKeysFile=/etc/ssh/authorized_keys",
            "-o", "PidFile=/etc/ssh/sshd.pid"]))


def start_image_hosts(image: str, addresses: dict, port: int, state: Path, keys: Path,
                      mounts: list[tuple[Path, str, bool]]) -> dict:
    """Each host: an overlay over the image's root filesystem, /proc /sys /dev,
    the cluster keys read-only at /etc/horovod/keys and the --mount binds;
    then the image's entrypoint, which starts sshd, in the host's namespaces.
    The image's part of the layout is saved first: entering a host reads it."""
    lower = sh("podman", "image", "mount", image).stdout.strip()
    config = json.loads(sh("podman", "image", "inspect", image).stdout)[0]["Config"]
    user = image_user(Path(lower), config.get("User") or "0")
    spec = {"name": image, "lower": lower, "env": config.get("Env") or [],
            "workdir": config.get("WorkingDir") or "/", "hosts": list(addresses), "port": port,
            "entrypoint": config.get("Entrypoint") or [], "user": user}
    # The keys are mounted read-only, as a container runtime mounts them: they
    # must be the image user's to read (as a site's keys are its users').
    for key_file in [keys, *keys.iterdir()]:
        os.chown(key_file, user["uid"], user["gid"])
    layout = load_layout(state)
    layout["image"] = spec
    (state / "cluster.json").write_text(json.dumps(layout, indent=2) + "\n")
    for host in addresses:
        host_dir = state / "hosts" / host
        root, upper, work = host_dir / "root", host_dir / "upper", host_dir / "work"
        for d in (root, upper, work):
            d.mkdir()
        sh("mount", "-t", "overlay", "overlay", "-o",
           f"lowerdir={lower},upperdir={upper},workdir={work}", str(root))
        shutil.copy(host_dir / "hosts", root / "etc" / "hosts")
        (root / "etc" / "hostname").write_text(host + "\n")
        sh("mount", "-t", "proc", "proc", str(root / "proc"))
        sh("mount", "--rbind", "/sys", str(root / "sys"))
        sh("mount", "--rbind", "/dev", str(root / "dev"))
        for source, target, read_only in [(keys, "/etc/horovod/keys", True), *mounts]:
            point = root / target.lstrip("/")
            point.mkdir(parents=True, exist_ok=True)
            sh("mount", "--bind", str(source), str(point))
            if read_only:
                sh("mount", "-o", "remount,bind,ro", str(point))
        log = open(host_dir / "container.log", "w")  # noqa: SIM115 - the host keeps it
        subprocess.Popen(enter_command(host, state, [*spec["entrypoint"], "sleep", "infinity"]),
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)
    return spec


def image_user(root: Path, spec: str) -> dict:
    """The image's USER (`uid[:gid]`, numbers or names) as the container
    runtime takes it: names and the home from the image's /etc/passwd and
    /etc/group; a bare user gets its own primary group."""
    name, _, group = spec.partition(":")
    users = [line.split(":") for line in (root / "etc" / "passwd").read_text().splitlines()
             if line.count(":") == 6]
    user = next((u for u in users if name in (u[0], u[2])), None)
    if user is None and not name.isdigit():
        raise UserError(f"the image's user {name} is not in its /etc/passwd")
    uid = int(user[2]) if user else int(name)
    gid = int(user[3]) if user and not group else None
    if group:
        groups = [line.split(":") for line in (root / "etc" / "group").read_text().splitlines()]
        found = next((g for g in groups if len(g) > 2 and group in (g[0], g[2])), None)
        if found is None and not group.isdigit():
            raise UserError(f"the image's group {group} is not in its /etc/group")
        gid = int(found[2]) if found else int(group)
    return {"uid": uid, "gid": gid if gid is not None else uid,
            "home": user[5] if user else "/"}


def parse_mount(text: str) -> tuple[Path, str, bool]:
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[1].startswith("/") or parts[2:] not in ([], ["ro"]):
        raise UserError(f"--mount wants SRC:DST or SRC:DST:ro with DST absolute, got {text}")
    source = Path(parts[0]).resolve()
    if not source.is_dir():
        raise UserError(f"--mount source {source} is not a directory")
    return source, parts[1], parts[2:] == ["ro"]


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
                    detail = result.stderr.strip().splitlines()[-1:] or ["no output"]
                    raise RunFailed(f"ssh from {source} to {target} failed: {detail[0]}")
                time.sleep(0.3)


def running(pid: int) -> bool:
    """The process exists and is not a zombie: a killed daemon of the hosts
    (its parent is init) stays one until init reaps it, which can take
    seconds where init is a container's own process manager."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


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
                pids = [p for p in pids if running(p)]
                time.sleep(0.1)
        # The link first: a deleted namespace is cleaned up later, in the
        # background, and its link would block the next `up` meanwhile.
        sh("ip", "link", "del", f"{ns}0", check=False)
        sh("ip", "link", "del", f"{ns}2", check=False, quiet=True)  # --second-network's
        sh("ip", "netns", "del", ns, check=False)
    for bridge in (BRIDGE, ROUTED_BRIDGE, SECOND_BRIDGE):
        sh("ip", "link", "del", bridge, check=False, quiet=True)
    if state.exists():
        for root in sorted(state.glob("hosts/*/root")):
            sh("umount", "-R", "-l", str(root), check=False)
        image = (load_layout(state).get("image") or {}) if (state / "cluster.json").exists() else {}
        if image:
            sh("podman", "image", "unmount", image["name"], check=False)
        shutil.rmtree(state)
    if not quiet:
        print(f"emulate_cluster: down ({len(namespaces)} hosts removed)")


RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def parse_rate(text: str) -> float:
    """'1gbit', '100mbit', '500kbit' -> bits per second."""
    for unit, scale in RATE_UNITS.items():
        if text.lower().endswith(unit):
            try:
                value = float(text[: -len(unit)])
            except ValueError:
                break
            if value > 0:
                return value * scale
    raise UserError(f"--rate {text!r}: give a rate such as 100mbit, 1gbit or 10gbit")


def shape(state: Path, rate: str | None, delay: str | None) -> None:
    """Limit each host's egress (so each direction of every pair) to `rate`,
    with tbf; a delay needs netem, which some kernels lack. Without rate or
    delay, remove the limits."""
    layout = load_layout(state)
    for host in layout["hosts"]:
        sh("tc", "-n", netns(host), "qdisc", "del", "dev", "eth0", "root", check=False)
    if not rate and not delay:
        layout.pop("shaping", None)
    else:
        for host in layout["hosts"]:
            shape_host(netns(host), rate, delay)
        layout["shaping"] = {"rate": rate, "delay": delay}
    (state / "cluster.json").write_text(json.dumps(layout, indent=2) + "\n")


def shape_host(ns: str, rate: str | None, delay: str | None, device: str = "eth0") -> None:
    if delay:
        netem = ["tc", "-n", ns, "qdisc", "add", "dev", device, "root", "handle", "1:",
                 "netem", "delay", delay, "limit", "100000"]
        result = sh(*netem, check=False)
        if result.returncode != 0:
            raise RunFailed(f"tc netem failed ({result.stderr.strip()}): this kernel may "
                            "lack netem; shape with --rate alone")
    if rate:
        bits = parse_rate(rate)
        # The bucket must hold the largest (GSO) packet, 64 KiB, and a tick's
        # worth of bytes at this rate; tbf drops anything larger.
        burst = max(256 * 1024, int(bits / 8 / 250))
        parent = ["parent", "1:1"] if delay else ["root"]
        sh("tc", "-n", ns, "qdisc", "add", "dev", device, *parent, "handle", "2:", "tbf",
           "rate", rate, "burst", str(burst), "latency", "50ms")


def status(state: Path) -> None:
    layout = load_layout(state)
    for host, address in layout["hosts"].items():
        alive = sh("ip", "netns", "pids", netns(host), check=False).stdout.split()
        print(f"{host}\t{address}\tport {layout['port']}\t{len(alive)} processes")
    if layout.get("shaping"):
        print(f"link shaped: {json.dumps(layout['shaping'])}")


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="emulate_cluster.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="create the hosts and start sshd on each")
    start.add_argument("--hosts", default="a,b", help="comma-separated host names")
    start.add_argument("--subnet", default=os.environ.get("HVT_EMULATE_SUBNET", DEFAULT_SUBNET),
                       help="first three octets of the private /24 for the hosts")
    start.add_argument("--ssh-port", type=int, default=None, metavar="PORT",
                       help=f"the hosts' sshd port (default: {SSH_DEFAULT_PORT}, ssh's own, "
                            f"for plain hosts; the image's {IMAGE_SSH_PORT} with --image)")
    start.add_argument("--image", default=None,
                       help="run the hosts from this image (podman storage) instead of "
                            "this machine's files")
    start.add_argument("--decoys", action="store_true",
                       help="give every host the interfaces that mislead multi-host jobs: "
                            + "; ".join(f"{name}: {what}" for name, what in DECOYS.items()))
    start.add_argument("--mount", action="append", default=[], metavar="SRC:DST[:ro]",
                       help="with --image: bind a directory into every host")
    start.add_argument("--routed", action="store_true",
                       help="every host after the first on a subnet of its own, behind a "
                            "router namespace")
    start.add_argument("--second-network", default=None, metavar="RATE",
                       help="every host also on eth2, a second network limited to RATE "
                            "(e.g. 20mbit)")
    run = commands.add_parser("exec", help="run a command on one host")
    run.add_argument("host")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    commands.add_parser("status", help="list the hosts")
    limit = commands.add_parser("shape", help="limit the hosts' links (tc), or --off")
    limit.add_argument("--rate", default=None, help="e.g. 1gbit, 10gbit, 100mbit")
    limit.add_argument("--delay", default=None, help="one-way delay, e.g. 1ms (needs netem)")
    limit.add_argument("--off", action="store_true", help="remove the limits")
    commands.add_parser("down", help="remove the hosts and all state")
    args = parser.parse_args(argv)

    if args.command == "up":
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        if len(set(hosts)) != len(hosts) or not all(h.isalnum() and len(h) <= 8 for h in hosts):
            raise UserError(f"--hosts wants distinct short alphanumeric names, got {args.hosts}")
        if args.mount and not args.image:
            raise UserError("--mount goes with --image (plain hosts see all files)")
        # Checked before anything is set up.
        mounts = [parse_mount(m) for m in args.mount]
        layout = up(hosts, args.subnet, args.ssh_port, STATE_DIR, args.image, mounts,
                    args.decoys, args.routed, args.second_network)
        print(f"emulate_cluster: up: {', '.join(f'{h}={a}' for h, a in layout['hosts'].items())}"
              f", sshd on port {layout['port']}; run commands with: "
              f"scripts/emulate_cluster.sh exec {hosts[0]} -- COMMAND")
    elif args.command == "exec":
        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        layout = load_layout(STATE_DIR)
        if args.host not in layout["hosts"]:
            raise UserError(f"no host {args.host!r}; hosts are {', '.join(layout['hosts'])}")
        if not command:
            raise UserError("exec needs a command: exec HOST -- COMMAND")
        argv_ = enter_command(args.host, STATE_DIR, command)
        os.execvp(argv_[0], argv_)
    elif args.command == "status":
        status(STATE_DIR)
    elif args.command == "shape":
        if args.off == bool(args.rate or args.delay):
            raise UserError("shape needs --rate and/or --delay, or --off")
        if args.rate:
            parse_rate(args.rate)  # checked before anything changes
        shape(STATE_DIR, args.rate, args.delay)
        limits = f"rate {args.rate or 'unlimited'}, delay {args.delay or 'none'}"
        print(f"emulate_cluster: link {'unshaped' if args.off else 'shaped: ' + limits}")
    else:
        down(STATE_DIR)
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog="emulate_cluster")


if __name__ == "__main__":
    cli()
