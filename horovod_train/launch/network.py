"""The network the ranks share: each node's interfaces, the IPv4 networks
on which every node reaches every other, the fastest of them, and the
check of one a user names.

Hosts with several interfaces are the usual cause of multi-host jobs that
hang: a bridge local to each host (Docker's `docker0`, the same address on
every host), a management network that only some hosts are on, a slow
second network beside the fast one. The job chooses here, from what every
node reports, networks rather than names (a node's `eth0` may be another's
`ens5`), on every path that starts ranks: srun's (launch/slurm/sbatch.py) and
scripts/launch.sh's (launch/horovodrun.py, which hands the choice to
horovodrun):

  - the candidates: each IPv4 subnet on which every node has an interface,
    whatever its name there; and, for the interfaces on a subnet that not
    every node has (hosts on routed networks), those interfaces grouped by
    name;
  - a candidate passes the nodes' tables when every node's interface on it
    is up (with a carrier), has an address that no other node has and,
    with more than one node, is not loopback;
  - then every node connects to every other node's address on it and
    checks that the node that answers is the one meant (a `docker0`
    address reaches the host itself, not its peer): reachable is the rule,
    not equal subnets;
  - where several pass, the first node times a few MB to the second on
    each, and the fastest alone carries the job; the others are said with
    their rates.

What the user names (HVT_NETWORK_INTERFACE, --network-interface) is
checked the same way, by connecting, and used as named. The ranks get the
choice as networks in CIDR form, the same on every node: Open MPI takes
them so, and each rank turns them into its own host's interface names for
Gloo and NCCL (core/interfaces.py, core/runtime.py; in the project's
Horovod, horovod/common/networks.py).

Standard library only, and core/interfaces.py, which reads the interfaces
and is the node's part of the probe (`python -m horovod_train.core.interfaces
probe`, under the batch step's python on every node, or over ssh).
"""

import contextlib
import dataclasses
import ipaddress
import json
import queue
import re
import secrets
import subprocess
import threading
import time

from horovod_train.core.interfaces import TOKEN_BYTES, Interface, interfaces_from_json


@dataclasses.dataclass(frozen=True)
class ProbeTimeouts:
    """How long the probe waits (HVT_PROBE_CONNECT_TIMEOUT_S, HVT_PROBE_TIMEOUT_S)."""
    connect_s: float = 3.0  # one node to another's address; reachable ones answer in ms
    whole_s: float = 120.0  # the whole probe, its start on every node included

    @classmethod
    def from_env(cls, env: dict) -> "ProbeTimeouts":
        """A ValueError of one line for a value that is not a positive number."""
        return cls(seconds("HVT_PROBE_CONNECT_TIMEOUT_S", env.get("HVT_PROBE_CONNECT_TIMEOUT_S"),
                           cls.connect_s),
                   seconds("HVT_PROBE_TIMEOUT_S", env.get("HVT_PROBE_TIMEOUT_S"), cls.whole_s))


def seconds(variable: str, text: str | None, default: float) -> float:
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise ValueError(f"{variable}={text}: want seconds, a number above 0")
    return value


# --- the candidates, from the nodes' tables -------------------------------------

@dataclasses.dataclass(frozen=True)
class Network:
    """A candidate: each node's interface on it (None where it has none)."""
    label: str  # "10.0.0.0/24" (a subnet), "eth0" (a name), "a:eth0,b:ens5" (per host)
    members: dict[str, Interface | None]
    by_subnet: bool  # True: the label is a subnet, and the names may differ per node

    @property
    def title(self) -> str:
        """The label, with the interfaces' names where the label is a subnet."""
        if not self.by_subnet:
            return self.label
        names = {node: iface.name for node, iface in self.members.items() if iface}
        if len(set(names.values())) == 1:
            return f"{self.label} on {next(iter(names.values()))}"
        return f"{self.label} on " + ", ".join(f"{node} {name}" for node, name in names.items())

    @property
    def cidrs(self) -> list[str]:
        """Each node's subnet on it, once each: what Open MPI and the ranks get."""
        return list(dict.fromkeys(str(iface.network) for iface in self.members.values()
                                  if iface and iface.address))

    def where(self, node: str) -> str:
        """A node, and its interface's name where the label is not that name."""
        iface = self.members.get(node)
        return f"{node} ({iface.name})" if iface and iface.name != self.label else node


def by_name(name: str, tables: dict[str, list[Interface]]) -> Network:
    return Network(name, {node: next((i for i in interfaces if i.name == name), None)
                          for node, interfaces in tables.items()}, False)


def candidates(tables: dict[str, list[Interface]]) -> list[Network]:
    """The subnets every node has an interface on, then the interfaces on
    none of those grouped by name (the routed case), in the order the
    nodes list them (the first node's first); names with neither an IPv4
    nor an IPv6 address anywhere are left out."""
    nodes = list(tables)
    subnets: dict[ipaddress.IPv4Network, dict[str, Interface]] = {}
    for node in nodes:
        for iface in tables[node]:
            if iface.address:
                subnets.setdefault(iface.network, {}).setdefault(node, iface)
    found = [Network(str(subnet), {node: members[node] for node in nodes}, True)
             for subnet, members in subnets.items() if len(members) == len(nodes)]
    covered = {(node, iface.name) for net in found for node, iface in net.members.items()}
    names = dict.fromkeys(iface.name for node in nodes for iface in tables[node]
                          if (iface.address or iface.ipv6) and (node, iface.name) not in covered)
    return found + [by_name(name, tables) for name in names]


def table_problem(net: Network) -> str | None:
    """None when the nodes' tables allow `net` (see the module's doc), else
    why not, in a few words naming the nodes (and their interfaces, where
    the label does not)."""
    members = net.members
    missing = [node for node, iface in members.items() if iface is None]
    if missing:
        return f"missing on {', '.join(missing)}"
    if len(members) > 1 and any(iface.loopback for iface in members.values()):
        return "loopback"
    down = [net.where(node) for node, iface in members.items() if not iface.up]
    if down:
        return f"down on {', '.join(down)}"
    bare = [node for node, iface in members.items() if not iface.address]
    if bare:
        only_ipv6 = all(members[node].ipv6 for node in bare)
        return (f"{'IPv6 only (the job uses IPv4)' if only_ipv6 else 'no IPv4 address'} on "
                f"{', '.join(bare)}")
    holders: dict[str, list[str]] = {}
    for node, iface in members.items():
        holders.setdefault(iface.ip, []).append(node)
    for ip, nodes in holders.items():
        if len(nodes) > 1:
            where = (f"all {len(nodes)} nodes" if len(nodes) == len(members) > 2
                     else " and ".join(nodes))
            return (f"the same address {ip} on {where} (a network local to each host, such "
                    "as Docker's bridge)")
    return None


def table_verdicts(tables: dict[str, list[Interface]]) -> dict[str, str | None]:
    """Each candidate's title: None where the tables allow it, else why not."""
    return {net.title: table_problem(net) for net in candidates(tables)}


# --- what the user names for srun's ranks ---------------------------------------

INTERFACE_NAME = re.compile(r"^[\w.@-]{1,15}$")  # what Linux allows, less / : and spaces


def parse_named(text: str | None, source: str = "HVT_NETWORK_INTERFACE") -> list[str]:
    """The items of a named network setting (`source`: HVT_NETWORK_INTERFACE,
    --network-interface): interface names, HOST:NAME items or IPv4 networks
    in CIDR form; a ValueError of one line for an item that is none."""
    items = [item.strip() for item in (text or "").split(",") if item.strip()]
    for item in items:
        kind = named_item_kind(item)
        if kind == "network":
            with contextlib.suppress(ValueError):
                ipaddress.IPv4Network(item)
                continue
        else:
            host, _, name = item.partition(":") if kind == "host" else ("", "", item)
            if INTERFACE_NAME.match(name) and (kind == "name" or host):
                continue
        raise ValueError(f"{source}={text}: {item!r} is not an interface name, HOST:NAME or "
                         "an IPv4 network in CIDR form (want e.g. eth0, a:eth0,b:ens5 or "
                         "10.0.0.0/24)")
    return items


def named_item_kind(item: str) -> str:
    """"network" (CIDR form), "host" (HOST:NAME) or "name"."""
    return "network" if "/" in item else "host" if ":" in item else "name"


def named_networks(items: list[str], tables: dict[str, list[Interface]]) -> list[Network]:
    """The networks of HVT_NETWORK_INTERFACE's items: a name (every node's
    interface of that name), a network in CIDR form (every node's interface
    with an address on it), HOST:NAME items (together one network: each
    node's interface named for it). A ValueError of one line for HOST:NAME
    items that name a host outside the job, or leave a node out."""
    found, per_host = [], {}
    for item in items:
        kind = named_item_kind(item)
        if kind == "network":
            subnet = ipaddress.IPv4Network(item)
            found.append(Network(item, {node: next(
                (i for i in interfaces if i.address and ipaddress.IPv4Address(i.ip) in subnet),
                None) for node, interfaces in tables.items()}, True))
        elif kind == "host":
            host, name = item.split(":", 1)
            per_host[host] = name
        else:
            found.append(by_name(item, tables))
    if per_host:
        label = ",".join(f"{host}:{name}" for host, name in per_host.items())
        strangers = [host for host in per_host if host not in tables]
        if strangers:
            raise ValueError(f"network interface {label}: {', '.join(strangers)} is not a node "
                             f"of the job ({', '.join(tables)})")
        left_out = [node for node in tables if node not in per_host]
        if left_out:
            raise ValueError(f"network interface {label} names none for "
                             f"{', '.join(left_out)}")
        found.append(Network(label, {node: next(
            (i for i in tables[node] if i.name == per_host[node]), None) for node in tables},
            False))
    return found


# --- reaching every node: the job's side of the probe ----------------------------
#
# The nodes' side is core/interfaces.py's probe_task, one on each node:
# started by one srun step with --input=all (stdin reaches every task, each
# task's stdout lines reach the job), or by one ssh per host.

class ProbeStep:
    """The probe's processes (one srun step, or one ssh per host), their
    lines read with a deadline, each message sent to all of them."""

    def __init__(self, commands: list[list[str]], nodes: list[str], timeout_s: float):
        self.nodes = nodes
        self.deadline = time.monotonic() + timeout_s
        self.processes = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
                          for command in commands]
        # The job's token, on the tasks' stdin (never a command line): they
        # answer only connections and datagrams that bring it.
        self.send({"token": secrets.token_hex(TOKEN_BYTES)})
        self.lines: queue.Queue = queue.Queue()
        self.errors: list[str] = []
        for process in self.processes:
            threading.Thread(target=self._read, args=(process.stdout, self.lines.put),
                             daemon=True).start()
            threading.Thread(target=self._read, args=(process.stderr, self.errors.append),
                             daemon=True).start()

    @staticmethod
    def _read(stream, keep) -> None:
        for line in stream:
            keep(line.strip())
        keep(None)

    def from_each_node(self, what: str) -> dict[str, dict]:
        """One JSON line from every node."""
        heard: dict[str, dict] = {}
        ended = 0
        while len(heard) < len(self.nodes):
            try:
                line = self.lines.get(timeout=max(0.0, self.deadline - time.monotonic()))
            except queue.Empty:
                silent = [node for node in self.nodes if node not in heard]
                raise RuntimeError(f"the network probe: no {what} from {', '.join(silent)} "
                                   "in time") from None
            if line is None:
                ended += 1
                if ended < len(self.processes):
                    continue  # another process may still answer for its node
                codes = [process.wait() for process in self.processes]
                said = [e for e in self.errors if e]
                raise RuntimeError(f"the network probe ended (exit "
                                   f"{max(codes, key=abs)}) before every node answered"
                                   + (f": {said[-1]}" if said else ""))
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if message.get("node") in self.nodes:
                    heard[message["node"]] = {**message, "received": time.time()}
        return heard

    def send(self, message: dict) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.stdin.write(json.dumps(message) + "\n")
                process.stdin.flush()

    def close(self) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(timeout=max(1.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class NoSharedInterface(ValueError):
    """No network passed: the user may know one that the rules do not,
    unless a firewall on one host is the cause (`firewall`)."""

    def __init__(self, message: str, firewall: bool = False):
        super().__init__(message)
        self.firewall = firewall


@dataclasses.dataclass(frozen=True)
class Choice:
    networks: list[Network]  # what the ranks use, best first
    named: bool  # the user's, checked, rather than chosen
    rejected: dict[str, str]  # the other candidates' titles, and why not

    @property
    def cidrs(self) -> list[str]:
        """The chosen networks in CIDR form, each node's subnet once."""
        return list(dict.fromkeys(cidr for net in self.networks for cidr in net.cidrs))

    @property
    def title(self) -> str:
        return ", ".join(net.title for net in self.networks)

    @property
    def said(self) -> str:
        """The choice as a run's first line says it."""
        return f"{self.title} ({'as set' if self.named else 'chosen'})"

    @property
    def left_out(self) -> list[str]:
        """Each other candidate and why not, as a run's first lines say it."""
        return [f"not {title}: {why}" for title, why in self.rejected.items()]

    @property
    def horovodrun_nics(self) -> str:
        """horovodrun's --network-interfaces: the interface names where every
        node calls each chosen network by one name (horovodrun as its users
        know it), else the networks in CIDR form (the project's Horovod turns
        those into each host's names)."""
        names = [{iface.name for iface in net.members.values() if iface} for net in self.networks]
        if all(len(found) == 1 for found in names):
            return ",".join(dict.fromkeys(name for found in names for name in found))
        return ",".join(self.cidrs)


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


def choose(commands: list[list[str]], nodes: list[str], named: list[str] | None = None,
           layers: dict[str, str] | None = None,
           timeouts: ProbeTimeouts = ProbeTimeouts(), then=None) -> Choice:
    """Run the probe's processes `commands` (one node's part of the probe
    each, or one srun step with a task per node of `nodes`), then decide
    from what they found (decide: the same arguments, and the same errors);
    a RuntimeError for a probe that failed. `then(step, hello, choice)`,
    where given, goes on with the same processes (the preflight's checks)."""
    step = ProbeStep(commands, nodes, timeouts.whole_s)
    try:
        hello = step.from_each_node("interfaces")
        tables = {node: interfaces_from_json(hello[node]["interfaces"]) for node in nodes}
        ports = {node: hello[node]["port"] for node in nodes}

        def connect(addresses: dict[str, dict[str, str]]) -> list[tuple[str, str, str, str]]:
            step.send({"addresses": addresses, "ports": ports,
                       "connect_timeout_s": timeouts.connect_s})
            reports = step.from_each_node("report")
            return [(node, *failure) for node in nodes for failure in reports[node]["failures"]]

        def measure(pairs: dict[str, tuple[str, str, str]]) -> dict[str, float | str]:
            step.send({"measure": [[label, source, address, ports[peer]]
                                   for label, (source, peer, address) in pairs.items()],
                       "connect_timeout_s": timeouts.connect_s})
            reports = step.from_each_node("measurement")
            return {label: rate for node in nodes
                    for label, rate in reports[node]["speeds"].items()}

        choice = decide(tables, connect, named, layers, measure)
        if then:
            then(step, hello, choice)
        return choice
    finally:
        step.close()


def second_address_problem(choice: Choice) -> str | None:
    """Why Open MPI cannot carry the job on the chosen networks, or None: an
    interface of one of them carries other IPv4 addresses beside the job's
    (a re-addressing, a floating address, a second network on one NIC).
    Open MPI announces one address per interface, which can be the other
    one, and drops its peers' connections from the job's address as coming
    from "an IP address that is unexpected": the ranks hang at start. Gloo
    and NCCL take the address of the job's network and train."""
    for net in choice.networks:
        for node, iface in net.members.items():
            if iface and iface.others:
                return (f"host {node}'s {iface.name} carries {', '.join(iface.others)} beside "
                        f"{iface.address}, the job's address there: Open MPI announces one "
                        "address per interface and drops its peers' connections from the other "
                        "(the ranks would hang at start): remove the other address (ip addr del "
                        f"{iface.others[0]} dev {iface.name}) or give it an interface of its own, "
                        "or start the ranks over Gloo (--gloo)")
    return None


# --- the preflight's checks, on the chosen network -----------------------------

def pair_rounds(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair of nodes once, in rounds where each node is in one pair at
    most (the circle method): a round's pairs run at once, N-1 rounds."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    rounds = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        rounds.append([(x, y) for x, y in zip(ring[:half], reversed(ring[half:]), strict=True)
                       if x is not None and y is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def check_pairs(step: ProbeStep, hello: dict[str, dict], choice: Choice,
                connect_s: float, only: list[tuple[str, str]] | None = None,
                ) -> dict[tuple[str, str], dict]:
    """For each ordered pair (x, y): x's rate to y on the chosen network,
    the round trip and the share of datagrams lost, each pair of a round
    both ways at once; `only`: those pairs alone, one at a time."""
    net = choice.networks[0]
    found: dict[tuple[str, str], dict] = {}
    for pairs in pair_rounds(step.nodes) if only is None else [[pair] for pair in only]:
        plan = [[x, y, net.members[y].ip, hello[y]["port"], hello[y]["echo_port"]]
                for a, b in pairs for x, y in ((a, b), (b, a))]
        step.send({"pairs": plan, "connect_timeout_s": connect_s})
        reports = step.from_each_node("pair report")
        for node, report in reports.items():
            for peer, result in report["pairs"].items():
                found[(node, peer)] = result
    return found


def clock_offsets(step: ProbeStep, connect_s: float) -> dict[str, tuple[float, float]]:
    """Each node's clock against this one's: (offset, uncertainty) in
    seconds, the uncertainty being half the round trip of the question."""
    asked = time.time()
    step.send({"clock": True, "connect_timeout_s": connect_s})
    reports = step.from_each_node("clock")
    return {node: (report["clock"] - (asked + report["received"]) / 2,
                   (report["received"] - asked) / 2) for node, report in reports.items()}


def fastest(passed: list[Network], measure) -> tuple[Network, dict[str, str]]:
    """The network the first node sends to the second fastest on, and why
    each other one was left out. `measure` takes {label: (node, peer,
    peer's address)} and returns each label's MB/s, or what failed."""
    first, second = next(iter(passed[0].members)), list(passed[0].members)[1]
    rates = measure({net.label: (first, second, net.members[second].ip) for net in passed})
    timed = {net.label: rates.get(net.label) for net in passed}
    best = max((net for net in passed if isinstance(timed[net.label], float)),
               key=lambda net: timed[net.label], default=passed[0])
    left_out = {}
    for net in passed:
        if net is not best:
            rate = timed[net.label]
            left_out[net.title] = (
                f"slower, {rate:,.1f} MB/s from {first} to {second} against "
                f"{timed[best.label]:,.1f} MB/s on {best.label}" if isinstance(rate, float)
                else rate or "not measured")
    return best, left_out


def firewall_hint(tried: dict[str, dict[str, str]], unreached: dict[str, set[str]]) -> str:
    """Where every network that was tried failed only at one node, which
    the probe itself reached (its part runs there, over ssh or srun), that
    node lets the launcher in and not the job's ports: say so, and the fix.
    Connecting cannot tell this from a route that fails, but a node that
    answers on every network but none is the usual case."""
    blocked = {peer for peers in unreached.values() for peer in peers}
    if len(blocked) != 1 or not tried or set(tried) != set(unreached):
        return ""
    node = blocked.pop()
    return (f" (a firewall on {node}? the probe runs there, over ssh or srun, yet no other "
            "node reaches its ports on any network: let TCP and UDP from the job's hosts in "
            "there, not ssh alone, or open a range of ports and name it in HVT_PORTS)")


def decide(tables: dict[str, list[Interface]], connect, named: list[str] | None = None,
           layers: dict[str, str] | None = None, measure=None) -> Choice:
    """Choose the networks from the nodes' interface tables, or check the
    `named` ones (HVT_NETWORK_INTERFACE's items); `layers`, the user's own
    variables of a layer (NCCL_SOCKET_IFNAME=ib0, ...), are checked as that
    layer reads them. `connect` tries every node's address on each network
    that passes the tables, {label: {node: ip}}, from every other node, and
    returns what failed: (node, label, peer, why). Where several networks
    pass and none was named, `measure` (see fastest) picks the fastest. A
    ValueError of one line names what cannot carry the job."""
    known = list(dict.fromkeys(iface.name for interfaces in tables.values()
                               for iface in interfaces))
    selections = {variable: layer_selection(variable, value, known)
                  for variable, value in (layers or {}).items()}
    chosen_from = named_networks(named, tables) if named else candidates(tables)
    checked = {net.label: net for net in chosen_from}
    for name in [name for selection in selections.values() if selection
                 for name in selection[0]]:
        checked.setdefault(name, by_name(name, tables))
    why = {label: table_problem(net) for label, net in checked.items()}
    addresses = {label: {node: iface.ip for node, iface in checked[label].members.items()}
                 for label, reason in why.items() if reason is None}
    unreached: dict[str, set[str]] = {}  # each network the tables allowed: who was not reached
    for node, label, peer, failure in connect(addresses):
        unreached.setdefault(label, set()).add(peer)
        if why[label] is None:
            why[label] = f"{node} cannot reach {checked[label].where(peer)}: {failure}"
    for net in chosen_from if named else []:
        if why[net.label]:
            what = "network" if named_item_kind(net.label) == "network" else "network interface"
            raise ValueError(f"{what} {net.label} cannot carry the job: {why[net.label]}")
    for variable, selection in selections.items():
        if selection:
            check_layer(variable, layers[variable], *selection, why)
    passed = [net for net in chosen_from if why[net.label] is None]
    rejected = {net.title: why[net.label] for net in chosen_from if why[net.label]}
    if not passed:
        hint = firewall_hint(addresses, unreached)
        raise NoSharedInterface("no network connects every node: " + "; ".join(
            f"{title}: {reason}" for title, reason in rejected.items()) + hint, bool(hint))
    if len(passed) > 1 and not named and measure and len(tables) > 1:
        best, slower = fastest(passed, measure)
        passed, rejected = [best], {**rejected, **slower}
    return Choice(passed, bool(named), rejected)

