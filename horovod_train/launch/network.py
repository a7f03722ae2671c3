"""The network the ranks share: each host's interfaces, which of them
connect every host to every other, and the check of one a user names.

Hosts with several interfaces are the usual cause of multi-host jobs that
hang: a bridge local to each host (Docker's `docker0`, the same address on
every host), a management network that only some hosts are on. Where
horovodrun starts the ranks, its own probe chooses the interfaces (and the
project's Horovod patch hands the choice to Open MPI's out-of-band channel
too); an interface the user names is checked here first, because
horovodrun then skips its probe and trusts the name. Where srun starts the
ranks nobody probes, so the job chooses here, from what every node reports:

  - an interface is usable when every node has it, up (with a carrier),
    with an IPv4 address that no other node has, all on one subnet; and,
    with more than one node, when it is not loopback;
  - then every node connects to every other node's address on it and
    checks that the node that answers is the one meant (a `docker0`
    address reaches the host itself, not its peer).

    python network.py list      this host's interfaces, as JSON
    python network.py probe     one node's part of the srun probe (below)

Standard library only: it runs under a bare python3 on Slurm nodes and on
hosts reached over ssh, and reads interfaces with the kernel's ioctls (one
IPv4 address per interface, the primary one).
"""

import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import os
import queue
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

CONNECT_TIMEOUT_S = 3  # one node to another's address; reachable ones answer in ms
PROBE_TIMEOUT_S = 120  # the whole probe step, its start on every node included


@dataclasses.dataclass(frozen=True)
class Interface:
    name: str
    up: bool  # administratively up and with a carrier (a cable, a peer, a port)
    loopback: bool
    address: str | None  # IPv4 in CIDR form, "10.0.0.11/24"; None without one

    @property
    def ip(self) -> str | None:
        return self.address.split("/")[0] if self.address else None


def local_interfaces() -> list[Interface]:
    """This host's interfaces, in the kernel's order."""
    found = []
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
            found.append(Interface(name, bool(flags & IFF_UP and flags & IFF_RUNNING),
                                   bool(flags & IFF_LOOPBACK), address))
    return found


def interfaces_from_json(items: list[dict]) -> list[Interface]:
    return [Interface(**item) for item in items]


# --- which interfaces the hosts share -------------------------------------------

def problem(name: str, tables: dict[str, list[Interface]]) -> str | None:
    """None when ranks on these hosts can use interface `name` (by what each
    host reports: see the module's doc), else why not, in a few words."""
    found = {host: iface for host, interfaces in tables.items()
             for iface in interfaces if iface.name == name}
    missing = [host for host in tables if host not in found]
    if missing:
        return f"missing on {', '.join(missing)}"
    if len(tables) > 1 and any(iface.loopback for iface in found.values()):
        return "loopback"
    down = [host for host, iface in found.items() if not iface.up]
    if down:
        return f"down on {', '.join(down)}"
    bare = [host for host, iface in found.items() if not iface.address]
    if bare:
        return f"no IPv4 address on {', '.join(bare)}"
    holders: dict[str, list[str]] = {}
    for host, iface in found.items():
        holders.setdefault(iface.ip, []).append(host)
    for ip, hosts in holders.items():
        if len(hosts) > 1:
            return (f"the same address {ip} on {' and '.join(hosts)} (a network local to "
                    "each host, such as Docker's bridge)")
    if len({ipaddress.IPv4Interface(iface.address).network for iface in found.values()}) > 1:
        return "on different subnets: " + ", ".join(
            f"{host} {iface.address}" for host, iface in found.items())
    return None


def verdicts(tables: dict[str, list[Interface]]) -> dict[str, str | None]:
    """Each interface name with an IPv4 address on some host, in the first
    host's order: None where the hosts can use it, else why not."""
    names = dict.fromkeys(iface.name for interfaces in tables.values()
                          for iface in interfaces if iface.address)
    return {name: problem(name, tables) for name in names}


def check_named(names: list[str], tables: dict[str, list[Interface]]) -> None:
    """Interfaces a user named: a ValueError of one line for the first that
    the hosts cannot use."""
    for name in names:
        why = problem(name, tables)
        if why:
            raise ValueError(f"network interface {name} cannot carry the job: {why}")


# --- reaching every node (the srun probe) ---------------------------------------
#
# One task on each node, started by the job with srun --input=all: stdin
# reaches every task, each task's stdout lines reach the job. Each task
# listens on a port of its own, says its node, port and interfaces; the job
# answers with the addresses to try; each task connects to every other
# node's address on each interface, reads the name of the node that
# answered, and reports what failed; the job closes stdin and the tasks end.

def answer_connections(listener: socket.socket, node: str) -> None:
    while True:
        conn, _ = listener.accept()
        with conn, contextlib.suppress(OSError):
            conn.sendall(node.encode() + b"\n")


def reach(node: str, address: str, port: int) -> str | None:
    """None when `node` answers at address:port, else what happened."""
    try:
        with socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S) as conn:
            answer = conn.makefile("rb").readline().decode(errors="replace").strip()
    except TimeoutError:
        return f"no answer from {address} within {CONNECT_TIMEOUT_S} s"
    except OSError as err:
        return f"{address}: {err.strerror or err}"
    if answer != node:
        return f"{address} is {answer or 'something else'} there, not {node}"
    return None


def emit(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def probe_task() -> int:
    """One node's part of the probe."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    listener = socket.create_server(("0.0.0.0", 0), backlog=1024)
    threading.Thread(target=answer_connections, args=(listener, node), daemon=True).start()
    emit({"node": node, "port": listener.getsockname()[1],
          "interfaces": [dataclasses.asdict(iface) for iface in local_interfaces()]})
    line = sys.stdin.readline()
    if not line:
        return 0
    plan = json.loads(line)
    targets = [(name, peer, address) for name, addresses in plan["addresses"].items()
               for peer, address in addresses.items() if peer != node]
    with ThreadPoolExecutor(max_workers=64) as pool:
        verdicts = list(pool.map(lambda t: reach(t[1], t[2], plan["ports"][t[1]]), targets))
    failures = [[name, peer, why]
                for (name, peer, _), why in zip(targets, verdicts, strict=True) if why]
    emit({"node": node, "failures": failures})
    sys.stdin.read()  # until the job closes stdin: the other nodes may still connect here
    return 0


class ProbeStep:
    """The job's side of the probe: the srun step, its lines read with a
    deadline."""

    def __init__(self, command: list[str], nodes: list[str], timeout_s: float):
        self.nodes = nodes
        self.deadline = time.monotonic() + timeout_s
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.errors: list[str] = []
        threading.Thread(target=self._read, args=(self.process.stdout, self.lines.put),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, self.errors.append),
                         daemon=True).start()

    @staticmethod
    def _read(stream, keep) -> None:
        for line in stream:
            keep(line.strip())
        keep(None)

    def from_each_node(self, what: str) -> dict[str, dict]:
        """One JSON line from every node."""
        heard: dict[str, dict] = {}
        while len(heard) < len(self.nodes):
            try:
                line = self.lines.get(timeout=max(0.0, self.deadline - time.monotonic()))
            except queue.Empty:
                silent = [node for node in self.nodes if node not in heard]
                raise RuntimeError(f"the network probe: no {what} from {', '.join(silent)} "
                                   "in time") from None
            if line is None:
                self.process.wait()
                said = [e for e in self.errors if e]
                raise RuntimeError(f"the network probe step ended (exit "
                                   f"{self.process.returncode}) before every node answered"
                                   + (f": {said[-1]}" if said else ""))
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if message.get("node") in self.nodes:
                    heard[message["node"]] = message
        return heard

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class NoSharedInterface(ValueError):
    """No interface passed: the user may know one that the rules do not."""


@dataclasses.dataclass(frozen=True)
class Choice:
    interfaces: list[str]  # what the ranks use, best first
    named: bool  # the user's, checked, rather than chosen
    rejected: dict[str, str]  # the other names, and why not


def layer_selection(variable: str, value: str,
                    known: list[str]) -> tuple[list[str], bool] | None:
    """The interfaces a layer's own variable selects, as the layer reads it,
    among `known` (every name some node has), and whether each of them must
    carry the job (True) or one is enough (False); None for a value that is
    not checked, NCCL's exclusion list (^...)."""
    items = [item.strip() for item in value.lstrip("^=").split(",") if item.strip()]
    if variable == "NCCL_SOCKET_IFNAME":
        if value.startswith("^"):
            return None
        if value.startswith("="):  # exact names, NCCL takes those it finds
            return items, False
        return [name for name in known if name.startswith(tuple(items))], False  # prefixes
    # HOROVOD_GLOO_IFACE's one name, Open MPI's list (a subnet in CIDR form is no name).
    return [item for item in items if "/" not in item], True


def check_layer(variable: str, value: str, names: list[str], every: bool,
                why: dict[str, str | None]) -> None:
    """A ValueError of one line when the layer's selection cannot carry the job."""
    if every:
        for name in names:
            if why[name]:
                raise ValueError(f"{variable}={value}: network interface {name} cannot carry "
                                 f"the job: {why[name]}")
    elif not any(why[name] is None for name in names):
        reasons = "; ".join(f"{name}: {why[name]}" for name in names) or "no node has one"
        raise ValueError(f"{variable}={value}: no interface it selects can carry the job: "
                         f"{reasons}")


def choose(command: list[str], nodes: list[str], named: list[str] | None = None,
           layers: dict[str, str] | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> Choice:
    """Run the probe step `command` (one task per node of `nodes`) and
    choose the interfaces, or check the `named` ones; `layers`, the user's
    own variables of a layer (NCCL_SOCKET_IFNAME=ib0, ...), are checked as
    that layer reads them. A ValueError names what cannot carry the job; a
    RuntimeError, a probe that failed."""
    step = ProbeStep(command, nodes, timeout_s)
    try:
        hello = step.from_each_node("interfaces")
        tables = {node: interfaces_from_json(hello[node]["interfaces"]) for node in nodes}
        known = list(dict.fromkeys(iface.name for node in nodes for iface in tables[node]))
        selections = {variable: layer_selection(variable, value, known)
                      for variable, value in (layers or {}).items()}
        why = verdicts(tables)
        addressed = list(why)
        for name in [*(named or []), *[name for selection in selections.values()
                                       if selection for name in selection[0]]]:
            why.setdefault(name, problem(name, tables))
        tried = [name for name, reason in why.items() if reason is None]
        addresses = {name: {node: next(i.ip for i in tables[node] if i.name == name)
                            for node in nodes} for name in tried}
        step.send({"addresses": addresses,
                   "ports": {node: hello[node]["port"] for node in nodes}})
        reports = step.from_each_node("report")
    finally:
        step.close()
    for node in nodes:
        for name, peer, failure in reports[node]["failures"]:
            if why[name] is None:
                why[name] = f"{node} cannot reach {peer}: {failure}"
    for name in named or []:
        if why[name]:
            raise ValueError(f"network interface {name} cannot carry the job: {why[name]}")
    for variable, selection in selections.items():
        if selection:
            check_layer(variable, layers[variable], *selection, why)
    if named:
        return Choice(list(named), True, {})
    chosen = [name for name in addressed if why[name] is None]
    rejected = {name: why[name] for name in addressed if why[name]}
    if not chosen:
        raise NoSharedInterface("no network interface connects every node: "
                         + "; ".join(f"{name}: {reason}" for name, reason in rejected.items()))
    return Choice(chosen, False, rejected)


def main(argv: list[str]) -> int:
    if argv == ["list"]:
        print(json.dumps([dataclasses.asdict(iface) for iface in local_interfaces()]))
        return 0
    if argv == ["probe"]:
        return probe_task()
    print(__doc__.strip(), file=sys.stderr if argv not in (["-h"], ["--help"]) else sys.stdout)
    return 0 if argv in (["-h"], ["--help"]) else 2


SOURCE = Path(__file__).resolve()  # run as a script on other hosts (python - list)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
