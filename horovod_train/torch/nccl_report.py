"""Which transport NCCL chose, read from NCCL's own debug output: the network
it uses between hosts (InfiniBand/RoCE, sockets, or a plugin's), that
network's devices as NCCL printed them, and what the connections between
ranks went over. NCCL chooses on its own and says nothing unless asked, so a
container that cannot open the host's InfiniBand devices trains over sockets
without a word (NVIDIA/nccl#451); the run's first lines and summary.json say
which it was.

The line formats are NCCL 2.30.7's (src/debug.cc, src/init.cc,
src/transport/net_ib/init.cc, src/transport/net_socket.cc,
src/transport/{net,p2p,shm}.cc); where earlier versions print otherwise, the
pattern says so."""

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

# NCCL reads these once, at its first line. Where the user set any of them,
# in the environment or in NCCL's configuration files, NCCL's output is
# theirs: nothing is changed and nothing read.
DEBUG_VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
# Read after NCCL_CONF_FILE (or ~/.nccl.conf); the environment wins over both
# (src/misc/param.cc).
SYSTEM_CONFIG = Path("/etc/nccl.conf")
# Every line read here is logged under INIT (beside NET, P2P or SHM), and
# NCCL prints a line when any of its subsystems is selected: INIT passes
# them all, and little else.
DEBUG_SUBSYS = "INIT"
# NCCL puts its pid for %p: a child process that starts NCCL with the
# environment it inherited writes a file of its own, not over this one.
DEBUG_FILE_NAME = "nccl.%p.log"
INFINIBAND_CLASS = Path("/sys/class/infiniband")

# Lines are "host:pid:tid [cudaDev] NCCL INFO message", with a timestamp in
# front where NCCL_DEBUG_TIMESTAMP_LEVELS asks for one.
VERSION_LINE = re.compile(r"NCCL INFO NCCL version (\S+)")
NETWORK_LINE = re.compile(r"NCCL INFO Using network (.+)")
# "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>"
IB_LINE = re.compile(r"NCCL INFO NET/IB : Using([^;]*)")
# mlx5_0:1/IB; 2.30 may add a rail and plane after the port (mlx5_0:1:2/IB,
# mlx5_0:1::1/IB), and 2.21 to 2.23 group merged devices: [0]={[0] mlx5_0:1/IB, ...}
IB_DEVICE = re.compile(r"[^\s:\[\]{},]+:\d+(?::\d*)*/\w+")
# "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>"
SOCKET_LINE = re.compile(r"NCCL INFO NET/Socket : Using(.*)")
SOCKET_INTERFACE = re.compile(r"\[\d+\]([^\s:]+):(\S*?)(?:<\d+>)?(?=\s|$)")
# "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA", "... via P2P/IPC",
# "Channel 00 : 0[0] -> 1[1] via SHM/direct" (before 2.30: SHM/direct/direct),
# "CollNet 00/0 : 0 [send] via COLLNET/SHARP/0". A plugin's name may hold spaces.
CONNECTION_LINE = re.compile(
    r"NCCL INFO (?:Channel|CollNet) \d.* via ((?:NET|COLLNET)/.+?(?=/\d)|P2P/\w+|\w+)")


def debug_settings(directory: Path) -> dict[str, str]:
    """NCCL's INFO lines of the INIT subsystem, into a file in `directory`."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYS,
            "NCCL_DEBUG_FILE": str(directory / DEBUG_FILE_NAME)}


def user_debug_setting(environ, system_config: Path = SYSTEM_CONFIG) -> str | None:
    """Where the user set NCCL's debug output ("NCCL_DEBUG is set by the
    user"), if they did: the environment, or NCCL's configuration files."""
    for name in DEBUG_VARIABLES:
        if name in environ:
            return f"{name} is set by the user"
    user_config = environ.get("NCCL_CONF_FILE")
    if not user_config and environ.get("HOME"):
        user_config = os.path.join(environ["HOME"], ".nccl.conf")
    for config in filter(None, [user_config, system_config]):
        try:
            lines = Path(config).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for name in DEBUG_VARIABLES:
            if any(line.startswith(f"{name}=") for line in lines):
                return f"{name} is set in {config}"
    return None


def debug_file(directory: Path, pid: int) -> Path:
    """The file NCCL makes of debug_settings' NCCL_DEBUG_FILE in process `pid`."""
    return directory / DEBUG_FILE_NAME.replace("%p", str(pid))


class DebugOutput:
    """This process's NCCL debug output, in a private temporary file. NCCL
    reads its debug settings once, at its first line: start() comes before
    hvd.init(), read() after NCCL's first collective."""

    def __init__(self, environ=os.environ, temp_parent: str | None = None,
                 system_config: Path = SYSTEM_CONFIG):
        self.environ = environ
        self.temp_parent = temp_parent
        self.system_config = system_config
        self.directory: Path | None = None
        self.not_read: str | None = None  # why nothing is read, if so

    def start(self) -> None:
        self.not_read = user_debug_setting(self.environ, self.system_config)
        if self.not_read:
            return
        try:
            self.directory = Path(tempfile.mkdtemp(prefix="horovod-train-nccl-",
                                                   dir=self.temp_parent))
        except OSError as err:
            self.not_read = f"no temporary directory: {err.strerror or err}"
            return
        atexit.register(self.remove)  # a run that ends before read()
        self.environ.update(debug_settings(self.directory))

    def read(self) -> str:
        """What NCCL wrote so far ("" when not started), and the files
        removed; NCCL writes any later lines into its open, removed file."""
        if self.directory is None:
            return ""
        try:
            return debug_file(self.directory, os.getpid()).read_text(errors="replace")
        except OSError:
            return ""
        finally:
            self.remove()

    def remove(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def rank_record(self, host: str, infiniband_class: Path = INFINIBAND_CLASS) -> dict:
        """This rank's record: parse() of what NCCL wrote, this host's
        InfiniBand devices, and why nothing was read, if so."""
        return {"host": host, **parse(self.read()),
                "infiniband": infiniband_devices(infiniband_class), "not_read": self.not_read}


def parse(text: str) -> dict:
    """NCCL's debug text as a record: its version, the network it uses
    ("IB", "Socket" or a plugin's name), that network's devices as NCCL
    printed them (mlx5_0:1/IB; eth0 10.0.0.1) and the transports its
    connections between ranks used (NET/IB, P2P/IPC, SHM, ...)."""
    version = network = None
    ib_devices, interfaces, transports = [], [], set()
    for line in text.splitlines():
        if match := VERSION_LINE.search(line):
            version = version or match[1]
        elif match := NETWORK_LINE.search(line):
            network = network or match[1].strip()
        elif match := IB_LINE.search(line):
            ib_devices = IB_DEVICE.findall(match[1])
        elif match := SOCKET_LINE.search(line):
            interfaces = [f"{name} {address}".strip()
                          for name, address in SOCKET_INTERFACE.findall(match[1])]
        elif match := CONNECTION_LINE.search(line):
            transports.add(match[1])
    # IB plugins derived from NCCL's (IBext_...) print NCCL's NET/IB line.
    devices = (ib_devices if network and network.startswith("IB")
               else interfaces if network == "Socket" else [])
    return {"version": version, "network": network, "devices": devices,
            "transports": sorted(transports)}


def infiniband_devices(class_dir: Path = INFINIBAND_CLASS) -> list[str]:
    """This host's InfiniBand/RoCE devices with a port up (NCCL skips the
    others). The kernel lists them here also in a container that lacks the
    /dev/infiniband that NCCL opens them by."""
    try:
        names = sorted(entry.name for entry in class_dir.iterdir())
    except OSError:
        return []
    return [name for name in names
            if any(port_active(state) for state in (class_dir / name / "ports").glob("*/state"))]


def port_active(state_file: Path) -> bool:
    try:
        return state_file.read_text().split()[-1:] == ["ACTIVE"]  # "4: ACTIVE"
    except OSError:
        return False


def sockets_despite_infiniband(network: str | None, infiniband: list[str]) -> bool:
    """The warning's rule: NCCL chose sockets on a host with InfiniBand/RoCE ports up."""
    return network == "Socket" and bool(infiniband)


def sockets_warning(ranks: list[dict]) -> str | None:
    """One line naming the hosts where sockets_despite_infiniband holds, if any."""
    flagged = [r for r in ranks if r["not_read"] is None
               and sockets_despite_infiniband(r["network"], r["infiniband"])]
    if not flagged:
        return None
    hosts = ", ".join(dict.fromkeys(r["host"] for r in flagged))
    return (f"warning: NCCL chose sockets between hosts, though InfiniBand/RoCE ports are up "
            f"on {hosts} ({', '.join(flagged[0]['infiniband'])}): a container needs "
            "/dev/infiniband; check NCCL_IB_DISABLE and NCCL_IB_HCA")


def run_record(ranks: list[dict]) -> dict:
    """The run's record (summary.json's "nccl") from every rank's, in rank
    order: rank 0's network and devices, every rank's transports."""
    root = ranks[0]
    networks = {r["network"] for r in ranks if r["not_read"] is None}
    return {
        "version": root["version"],
        "network": root["network"],
        "devices": root["devices"],
        "transports": sorted({t for r in ranks for t in r["transports"]}),
        "between_hosts": len({r["host"] for r in ranks}) > 1,
        "ranks_agree": len(networks) <= 1,
        "warning": sockets_warning(ranks),
        "not_read": root["not_read"],
        "per_rank": ranks,
    }


def transport_line(record: dict) -> str:
    """run_record() as rank 0's line."""
    if record["not_read"]:
        return f"nccl: transport not read: {record['not_read']}"
    network = record["network"]
    if network is None:
        return "nccl: transport not read: NCCL's debug output names no network"
    devices = f" ({', '.join(record['devices'])})" if record["devices"] else ""
    over = f"over {'sockets' if network == 'Socket' else network}{devices}"
    connections = ", ".join(record["transports"]) or "no connections"
    if record["between_hosts"]:
        line = f"nccl: between hosts {over}; connections {connections}"
    elif any(t.startswith(("NET/", "COLLNET/")) for t in record["transports"]):
        line = f"nccl: one host, {over}; connections {connections}"
    else:
        line = f"nccl: one host, no network ({connections})"
    if not record["ranks_agree"]:
        hosts_by_network = {}
        for rank in record["per_rank"]:
            if rank["not_read"] is None:
                hosts_by_network.setdefault(rank["network"], {})[rank["host"]] = None
        line += "; ranks differ: " + "; ".join(
            f"{name} on {','.join(hosts)}" for name, hosts in hosts_by_network.items())
    return line


def report_lines(record: dict) -> list[str]:
    """What rank 0 prints: the transport line, and the warning if any."""
    return [transport_line(record)] + ([record["warning"]] if record["warning"] else [])
