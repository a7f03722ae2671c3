"""This host's network interfaces, read from the kernel; the networks a
job chose (IPv4 networks in CIDR form) turned into this host's interface
names (each node may call the same network by a different name); and this
host's part of the network probe (launch/network.py runs the job's part).

    python interfaces.py list     this host's interfaces, as JSON
    python interfaces.py probe [NODE]
                                  this host's part of the probe (stdin, stdout)

Standard library only, and runnable as a script under a bare python3 (the
source on stdin, or as `python3 -c SOURCE probe` where stdin carries the
probe's plan): the launchers read other hosts' interfaces with it, and each
rank reads its own host's at its start (core/runtime.py). IPv4 is read with
the kernel's ioctls (one address per interface, the primary one: secondary
addresses are not candidates); IPv6 only to say that an interface has it,
from /proc/net/if_inet6.
"""

import contextlib
import dataclasses
import errno
import fcntl
import hmac
import ipaddress
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# <linux/sockios.h> and <linux/if.h>
SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40
IPV6_TABLE = Path("/proc/net/if_inet6")
IPV6_LOCAL_SCOPES = {0x10, 0x20}  # host and link: every interface has those, they route nowhere


@dataclasses.dataclass(frozen=True)
class Interface:
    name: str
    up: bool  # administratively up and with a carrier (a cable, a peer, a port)
    loopback: bool
    address: str | None  # IPv4 in CIDR form, "10.0.0.11/24"; None without one
    ipv6: bool = False  # has an IPv6 address beyond host and link scope
    # Its other IPv4 addresses, in CIDR form (a re-addressing, a floating
    # address, a second network on one NIC): Open MPI announces one address
    # per interface, which may be one of these.
    others: tuple[str, ...] = ()

    @property
    def ip(self) -> str | None:
        return self.address.split("/")[0] if self.address else None

    @property
    def network(self) -> ipaddress.IPv4Network | None:
        return ipaddress.IPv4Interface(self.address).network if self.address else None


def ipv6_names() -> set[str]:
    """The interfaces with an IPv6 address that routes beyond the host and link."""
    try:
        lines = IPV6_TABLE.read_text().splitlines()
    except OSError:  # a kernel without IPv6
        return set()
    return {fields[5] for fields in (line.split() for line in lines)
            if len(fields) == 6 and int(fields[3], 16) not in IPV6_LOCAL_SCOPES}


def other_ipv4_addresses() -> dict[str, list[str]]:
    """Each interface's IPv4 addresses in CIDR form, as iproute2 lists them
    (the ioctls read one); {} where `ip` is missing or fails."""
    try:
        listing = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                                 text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, list[str]] = {}
    for fields in (line.split() for line in listing.splitlines()):
        if len(fields) > 3 and fields[2] == "inet":
            found.setdefault(fields[1].split("@")[0], []).append(fields[3])
    return found


def local_interfaces(others: bool = False) -> list[Interface]:
    """This host's interfaces, in the kernel's order; with `others`, each
    one's other IPv4 addresses too (iproute2 is asked: the probe and the
    list want them, a rank's start does not)."""
    found = []
    with_ipv6 = ipv6_names()
    listed = other_ipv4_addresses() if others else {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            flags = struct.unpack_from("H", fcntl.ioctl(sock, SIOCGIFFLAGS, request), 16)[0]
            try:
                ip = socket.inet_ntoa(fcntl.ioctl(sock, SIOCGIFADDR, request)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(sock, SIOCGIFNETMASK, request)[20:24])
                address = str(ipaddress.IPv4Interface(f"{ip}/{mask}"))
            except OSError:  # EADDRNOTAVAIL: no IPv4 address
                address = None
            others = tuple(item for item in listed.get(name, []) if item != address)
            found.append(Interface(name, bool(flags & IFF_UP and flags & IFF_RUNNING),
                                   bool(flags & IFF_LOOPBACK), address, name in with_ipv6,
                                   others))
    return found


def interfaces_from_json(items: list[dict]) -> list[Interface]:
    return [Interface(**{**item, "others": tuple(item.get("others", ()))}) for item in items]


def parse_networks(text: str) -> list[ipaddress.IPv4Network]:
    """A comma-separated list of IPv4 networks in CIDR form; a ValueError of
    one line for an item that is not one."""
    networks = []
    for item in (item.strip() for item in text.split(",")):
        try:
            networks.append(ipaddress.IPv4Network(item))
        except ValueError:
            raise ValueError(f"{item!r} is not an IPv4 network in CIDR form "
                             "(e.g. 10.0.0.0/24)") from None
    return networks


def names_on(networks: list[ipaddress.IPv4Network], interfaces: list[Interface]) -> list[str]:
    """The names of the interfaces whose IPv4 address lies on one of
    `networks`, in the networks' order (Open MPI matches an address to a
    network in CIDR form the same way)."""
    names: list[str] = []
    for network in networks:
        names += [iface.name for iface in interfaces
                  if iface.address and iface.name not in names
                  and ipaddress.IPv4Address(iface.ip) in network]
    return names


# --- this host's part of the probe -------------------------------------------
#
# One task on each host, its stdin and stdout joined to the job's side
# (launch/network.py: one srun step with --input=all, or one ssh per host).
# The job's first line is a token of its own, which every connection and
# datagram of the probe opens with: a task answers nothing else, so another
# job's probe or a stray sender learns nothing and measures nothing. Each
# task listens on a port of its own and says its node, port and
# interfaces; the job answers with the addresses to try, and each task
# connects to every other node's address on each candidate network, reads
# the name of the node that answers, and reports what failed; the job may
# then ask one node to time a few MB to another on each network that
# passed (the preflight: every pair of nodes, both ways, and a node's
# clock); the job closes stdin and the tasks end.

TOKEN_BYTES = 16
HELLO_TIMEOUT_S = 5  # for a connection's token: a silent one holds no thread for long
MEASURE_BYTES = 8 << 20  # a few MB: enough to tell 1 Gbit/s from 10, short on a slow one
MEASURE_MAX_S = 1.0  # what a slow network may take: its rate shows by then
CHUNK = 1 << 16


def receive_exactly(conn: socket.socket, size: int) -> bytes:
    """`size` bytes, or fewer where the peer closed first."""
    data = b""
    while len(data) < size and (chunk := conn.recv(size - len(data))):
        data += chunk
    return data


def answer(conn: socket.socket, node: str, token: bytes) -> None:
    """Given the job's token, say the node's name; then count what the peer
    sends until it stops sending, and say how much (the measuring side's
    end mark). Without the token, nothing."""
    with conn, contextlib.suppress(OSError):
        conn.settimeout(HELLO_TIMEOUT_S)
        if not hmac.compare_digest(receive_exactly(conn, TOKEN_BYTES), token):
            return
        conn.settimeout(None)
        conn.sendall(node.encode() + b"\n")
        received = 0
        while data := conn.recv(CHUNK):
            received += len(data)
        conn.sendall(f"{received}\n".encode())


def answer_connections(listener: socket.socket, node: str, token: bytes) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn, node, token), daemon=True).start()


# Sent after the peer's name, in full-size segments: a path that passes
# small packets and drops large ones (hosts set to jumbo frames, the switch
# not) lets the connection and the name through, and stalls a job's first
# large message, silently.
FULL_SIZE_BYTES = 1 << 16
MTU_HINT = ("small packets pass and full-size ones are lost: an MTU mismatch on the path "
            "(e.g. jumbo frames on the hosts, not on the switch): set one MTU on the hosts "
            "and every switch between them")


def reach(node: str, address: str, port: int, timeout_s: float, token: bytes) -> str | None:
    """None when `node` answers at address:port and takes a few full-size
    segments, else what happened."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as conn:
            conn.sendall(token)
            reader = conn.makefile("rb")
            said = reader.readline().decode(errors="replace").strip()
            if said != node:
                return f"{address} is {said or 'something else'} there, not {node}"
            try:
                conn.sendall(b"\0" * FULL_SIZE_BYTES)
                conn.shutdown(socket.SHUT_WR)
                received = int(reader.readline() or 0)
            except (TimeoutError, ValueError):
                received = 0
            if received != FULL_SIZE_BYTES:
                return f"{address}: {MTU_HINT}"
    except TimeoutError:
        return f"no answer from {address} within {timeout_s:g} s"
    except OSError as err:
        return f"{address}: {err.strerror or err}"
    return None


def measure(address: str, port: int, timeout_s: float, token: bytes,
            limit: int = MEASURE_BYTES, max_s: float = MEASURE_MAX_S) -> float | str:
    """MB/s sent to address:port (up to `limit` bytes, for at most about
    `max_s`), counted when the peer says what it received; or what went
    wrong."""
    block = b"\0" * CHUNK
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as conn:
            conn.sendall(token)
            reader = conn.makefile("rb")
            reader.readline()  # the peer's name
            started = time.monotonic()
            sent = 0
            while sent < limit and time.monotonic() - started < max_s:
                conn.sendall(block)
                sent += len(block)
            conn.shutdown(socket.SHUT_WR)
            received = int(reader.readline() or 0)
            elapsed = time.monotonic() - started
    except (OSError, ValueError) as err:
        return f"measuring {address}: {err}"
    return received / elapsed / 1e6 if received else f"measuring {address}: nothing arrived"


# The preflight's pair checks (launch/preflight.py): each pair of hosts
# times a transfer both ways at once, then echoes small UDP datagrams for
# the round trip and the share lost (TCP hides a lossy link behind
# retransmits, which show only as a slow job).
PAIR_BYTES = 64 << 20  # enough for a fast link to leave TCP's slow start
PAIR_MAX_S = 0.5  # per direction: a slow link shows its rate by then
ECHO_COUNT = 100
ECHO_GAP_S = 0.002  # paced, so that a loss is the link's, not a full socket buffer
ECHO_WAIT_S = 0.5  # after the last datagram, for the late ones


def echo_datagrams(sock: socket.socket, token: bytes) -> None:
    """Send back each datagram that opens with the job's token."""
    while True:
        with contextlib.suppress(OSError):
            data, peer = sock.recvfrom(64)
            if hmac.compare_digest(data[:TOKEN_BYTES], token):
                sock.sendto(data, peer)


def ping(address: str, port: int, token: bytes) -> dict:
    """Round trips to a peer's echo socket: the median in ms and the share
    of datagrams that never came back."""
    sent: dict[int, float] = {}
    times: list[float] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(ECHO_GAP_S)
        end = None
        for number in range(ECHO_COUNT):
            sent[number] = time.monotonic()
            with contextlib.suppress(OSError):
                sock.sendto(token + number.to_bytes(4, "big"), (address, port))
            end = time.monotonic() + ECHO_WAIT_S
            times += receive_echoes(sock, sent, time.monotonic() + ECHO_GAP_S)
        times += receive_echoes(sock, sent, end or time.monotonic(), until_all=True)
    times.sort()
    return {"rtt_ms": round(times[len(times) // 2] * 1000, 3) if times else None,
            "lost": round(1 - len(times) / ECHO_COUNT, 3)}


def receive_echoes(sock: socket.socket, sent: dict[int, float], until: float,
                   until_all: bool = False) -> list[float]:
    times = []
    while time.monotonic() < until and not (until_all and not sent):
        try:
            data = sock.recv(64)
        except (TimeoutError, OSError):
            continue
        started = sent.pop(int.from_bytes(data[TOKEN_BYTES:TOKEN_BYTES + 4], "big"), None)
        if started is not None:
            times.append(time.monotonic() - started)
    return times


def pair_check(address: str, port: int, echo_port: int, timeout_s: float,
               token: bytes) -> dict:
    """MB/s sent to a peer (up to PAIR_BYTES or PAIR_MAX_S), then the echoes."""
    rate = measure(address, port, timeout_s, token, PAIR_BYTES, PAIR_MAX_S)
    return {"mb_per_s": rate if isinstance(rate, float) else None,
            "error": None if isinstance(rate, float) else rate,
            **ping(address, echo_port, token)}


def emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def port_range(text: str | None) -> tuple[int, int] | None:
    """HVT_PORTS=LOW-HIGH, the ports a site's firewall opens between the
    job's hosts: (LOW, HIGH), or None where unset; a ValueError of one line
    for a value that is not such a range."""
    if not text:
        return None
    low, dash, high = text.partition("-")
    if not (dash and low.isdigit() and high.isdigit() and 1024 <= int(low) < int(high) <= 65535):
        raise ValueError(f"HVT_PORTS={text}: want a range of ports LOW-HIGH between 1024 and "
                         "65535, e.g. 50000-50200")
    return int(low), int(high)


def in_port_range(bind):
    """bind(port) on the first free port of HVT_PORTS (its result), or on
    the port the kernel gives (0) where it is unset."""
    ports = port_range(os.environ.get("HVT_PORTS"))
    if ports is None:
        return bind(0)
    for port in range(ports[0], ports[1] + 1):
        try:
            return bind(port)
        except OSError as err:
            if err.errno != errno.EADDRINUSE or port == ports[1]:
                raise


def probe_task(node: str | None = None) -> int:
    """This host's part, as `node` (the name the job knows it by: the host
    list's, Slurm's, else the hostname)."""
    node = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    try:
        token = bytes.fromhex(json.loads(sys.stdin.readline())["token"])
    except (ValueError, KeyError, TypeError):
        print("the network probe: its first line is not the job's token", file=sys.stderr)
        return 2
    # Every interface: the probe is what finds which of them join the nodes.
    listener = in_port_range(lambda port: socket.create_server(("0.0.0.0", port), backlog=1024))
    threading.Thread(target=answer_connections, args=(listener, node, token),
                     daemon=True).start()
    echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    in_port_range(lambda port: echo.bind(("0.0.0.0", port)))
    threading.Thread(target=echo_datagrams, args=(echo, token), daemon=True).start()
    emit({"node": node, "port": listener.getsockname()[1], "echo_port": echo.getsockname()[1],
          "interfaces": [dataclasses.asdict(iface) for iface in local_interfaces(others=True)]})
    for line in sys.stdin:  # until the job closes stdin: others may still connect here
        plan = json.loads(line)
        timeout_s = plan["connect_timeout_s"]
        if "addresses" in plan:
            targets = [(label, peer, address) for label, addresses in plan["addresses"].items()
                       for peer, address in addresses.items() if peer != node]
            # Every connection at once: a dead address costs its timeout once.
            ports = [plan["ports"][peer] for _, peer, _ in targets]
            with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
                verdicts = list(pool.map(reach, [peer for _, peer, _ in targets],
                                         [address for _, _, address in targets], ports,
                                         [timeout_s] * len(targets), [token] * len(targets)))
            emit({"node": node, "failures": [
                [label, peer, why] for (label, peer, _), why
                in zip(targets, verdicts, strict=True) if why]})
        elif "pairs" in plan:
            # This node's peer in this round: both send at once, as a
            # ring's neighbours do.
            emit({"node": node, "pairs": {
                peer: pair_check(address, port, echo_port, timeout_s, token)
                for source, peer, address, port, echo_port in plan["pairs"] if source == node}})
        elif "clock" in plan:
            emit({"node": node, "clock": time.time()})
        elif "measure" in plan:
            # One network after another: each gets the link to itself.
            emit({"node": node, "speeds": {
                label: measure(address, port, timeout_s, token)
                for label, source, address, port in plan["measure"] if source == node}})
    return 0


# Run as a script on other hosts (python3 -c SOURCE probe), where it has no file.
SOURCE = Path(__file__).resolve() if "__file__" in globals() else None

if __name__ == "__main__":
    if sys.argv[1:] == ["list"]:
        print(json.dumps([dataclasses.asdict(iface) for iface in local_interfaces(others=True)]))
    elif sys.argv[1:2] == ["probe"] and len(sys.argv) <= 3:
        sys.exit(probe_task(*sys.argv[2:]))
    else:
        print("usage: python3 interfaces.py list | probe [NODE]", file=sys.stderr)
        sys.exit(2)
