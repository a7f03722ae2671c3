"""A bound on how long a rank waits for the others, and the name of the
rank it waited for.

Horovod's collectives have no deadline over MPI, and Gloo's (30 s) ends a
rank with an error that names nobody. A rank stopped by the kernel or a
debugger (SIGSTOP), or a host cut off by a network partition, closes no
socket: the other ranks wait in their next allreduce, over MPI for ever.

So every rank runs a Watchdog thread that
  - sends a heartbeat to rank 0 every second over UDP (rank 0 answers each
    one), so that each rank knows which ranks, or whether rank 0, stopped
    answering;
  - ends its rank when no training step finished for `limit` seconds: one
    line naming the ranks that stopped answering (printed by the first rank
    of each host that still answers), SIGKILL for those of them on its own
    host (a stopped process would outlive the job), exit 1. Under
    horovodrun, mpirun or the Gloo driver then ends the rest.

Only progress counts: a slow link or a slow step that still finishes is
never taken for a dead rank, whatever the heartbeats say.

Each rank's socket is on its host's address on the job's network (the
controller's interface) where it has one, on a port of HVT_PORTS where that
is set; rank 0 answers only heartbeats that carry the job's token, which
rank 0 makes and the ranks share through Horovod.
"""

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from horovod_train.core import interfaces
from horovod_train.core.distributed import first_sentence
from horovod_train.core.errors import RunFailed, UserError, print_error

HEARTBEAT_EVERY_S = 1.0
# A rank not heard from for this long has stopped answering (for the
# message only: ending a rank takes `limit` seconds without progress).
SILENT_AFTER_S = 5.0
# How long a rank that does not say why waits for the one that does, at most
# the gap between their last steps (rank 0's epoch outputs).
SAYER_GRACE_S = 2.0
SIOCGIFADDR = 0x8915  # Linux: the IPv4 address of an interface


@dataclass(frozen=True)
class Peer:
    """What every rank tells the others when its watchdog starts."""

    rank: int
    hostname: str
    pid: int
    started: str  # /proc/PID/stat's start time: a reused pid is not this rank
    addresses: tuple[str, ...]  # rank 0's, where heartbeats go
    port: int  # rank 0's heartbeat port; 0 on the other ranks


def host_addresses() -> tuple[str, ...]:
    """This host's IPv4 addresses, one per interface that has one."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR,
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # down, or no IPv4 address
            found.append(socket.inet_ntoa(answer[20:24]))
    return tuple(found)


def network_address(network: str | None) -> str | None:
    """This host's address on the job's network: that of the first of the
    controller's interfaces (`network`, comma-separated names), or None
    where it names none this host has."""
    first = (network or "").split(",")[0].strip()
    for iface in interfaces.local_interfaces() if first else ():
        if iface.name == first and iface.ip:
            return iface.ip
    return None


def process_start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def describe_ranks(ranks: list[int], peers: list[Peer]) -> str:
    """`rank 3 on host b`, `ranks 2, 3 on host b and rank 0 on host a`."""
    by_host: dict[str, list[int]] = {}
    for rank in sorted(ranks):
        by_host.setdefault(peers[rank].hostname, []).append(rank)
    parts = [f"rank{'s' if len(group) > 1 else ''} {', '.join(map(str, group))} on host {host}"
             for host, group in by_host.items()]
    return " and ".join(parts)


def stall_message(limit: float, silent: list[int], peers: list[Peer], me: int) -> str:
    waited = f"no training step finished for {limit:g} s on rank {me} (host {peers[me].hostname})"
    if silent:
        cause = f"{describe_ranks(silent, peers)} stopped answering (stopped, or cut off)"
    else:
        cause = ("every rank still answers, so one of them is stuck outside Horovod "
                 "(in its data, its own code or a device)")
    return f"{waited}: {cause}; ending the job (--stall-limit {limit:g})"


class Watchdog:
    """See the module's doc. `beat()` after every step; `stop()` at the end."""

    def __init__(self, rank: int, peers: list[Peer], limit: float, job: str,
                 sock: socket.socket):
        self.rank, self.peers, self.limit, self.job, self.sock = rank, peers, limit, job, sock
        self.prog = Path(sys.argv[0]).name
        now = time.monotonic()
        self.last_progress = now
        # Rank 0: when it last heard each rank. The others: when rank 0 last
        # answered, what it said, and where it answers from.
        self.heard = [now] * len(peers)
        self.silent_after = min(SILENT_AFTER_S, limit / 2) if limit else SILENT_AFTER_S
        self.silent_seen_by_root: list[int] = []
        root = peers[0]
        if len(root.addresses) == 1:  # it listens on the job's network alone
            self.root_addresses = [(root.addresses[0], root.port)]
        elif root.hostname == peers[rank].hostname:
            self.root_addresses = [("127.0.0.1", root.port)]
        else:
            self.root_addresses = [(a, root.port) for a in root.addresses if a != "127.0.0.1"]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="horovod-train-watchdog",
                                        daemon=True)

    @classmethod
    def start(cls, rank: int, hostname: str, limit: float, allgather_object,
              network: str | None = None) -> "Watchdog":
        """Every rank calls this together (it allgathers): rank 0 opens the
        port the heartbeats go to. `network`: the controller's interface
        names on this host (Runtime.network)."""
        address = network_address(network)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            interfaces.in_port_range(lambda port: sock.bind((address or "0.0.0.0", port)))
        except OSError as err:
            sock.close()
            where = " inside HVT_PORTS" if os.environ.get("HVT_PORTS") else ""
            raise RunFailed(f"stall watchdog: cannot listen on {address or 'any address'}"
                            f"{where}: {err.strerror or err}") from None
        sock.settimeout(HEARTBEAT_EVERY_S / 4)
        where = (address,) if address else host_addresses()
        mine = Peer(rank, hostname, os.getpid(), process_start_time(os.getpid()),
                    where if rank == 0 else (), sock.getsockname()[1] if rank == 0 else 0)
        job = secrets.token_hex(8) if rank == 0 else ""
        gathered = allgather_object((mine, job), name="watchdog")
        peers, job = [peer for peer, _ in gathered], gathered[0][1]
        dog = cls(rank, peers, limit, job, sock)
        dog._thread.start()
        return dog

    def beat(self) -> None:
        """A step (or an evaluation batch) finished."""
        self.last_progress = time.monotonic()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
        self.sock.close()

    def silent_ranks(self) -> list[int]:
        """The ranks that stopped answering, as far as this rank knows."""
        now = time.monotonic()
        if self.rank == 0:
            return [r for r, t in enumerate(self.heard) if r and now - t > self.silent_after]
        if now - self.heard[0] > self.silent_after:
            return [0]
        return list(self.silent_seen_by_root)

    def kill_silent_ranks_here(self, silent: list[int]) -> None:
        """SIGKILL the ranks among `silent` that run on this host: the job
        is ending, and a stopped process would outlive it (horovodrun's Gloo
        driver ends remote ranks by closing their ssh, which a stopped
        process never notices)."""
        here = self.peers[self.rank].hostname
        for rank in silent:
            peer = self.peers[rank]
            if (peer.hostname == here and peer.started
                    and process_start_time(peer.pid) == peer.started):
                with contextlib.suppress(OSError):
                    os.kill(peer.pid, signal.SIGKILL)

    def _run(self) -> None:
        next_heartbeat = 0.0
        while not self._stopped.is_set():
            now = time.monotonic()
            if self.rank and now >= next_heartbeat:
                self._send_heartbeat()
                next_heartbeat = now + HEARTBEAT_EVERY_S
            self._receive()
            if self.limit and time.monotonic() - self.last_progress > self.limit:
                self._end_rank()

    def _send_heartbeat(self) -> None:
        message = json.dumps({"job": self.job, "rank": self.rank}).encode()
        for address in self.root_addresses:
            # Unreachable now (a partition): rank 0 hearing nothing is the signal.
            with contextlib.suppress(OSError):
                self.sock.sendto(message, address)

    def _receive(self) -> None:
        try:
            data, sender = self.sock.recvfrom(65536)
            message = json.loads(data)
            if message.get("job") != self.job:
                return  # not this job's
        except (TimeoutError, OSError, ValueError, AttributeError):
            return
        if self.rank == 0:
            rank = message.get("rank")
            if isinstance(rank, int) and 0 < rank < len(self.heard):
                self.heard[rank] = time.monotonic()
                reply = {"job": self.job, "silent": self.silent_ranks()}
                with contextlib.suppress(OSError):
                    self.sock.sendto(json.dumps(reply).encode(), sender)
        else:
            self.heard[0] = time.monotonic()
            self.silent_seen_by_root = [r for r in message.get("silent", ())
                                        if isinstance(r, int) and 0 <= r < len(self.peers)]
            # Rank 0 answered from here: send only here from now on.
            self.root_addresses = [sender]

    def _end_rank(self) -> None:
        silent = self.silent_ranks()
        self.end_with(stall_message(self.limit, silent, self.peers, self.rank), silent)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # the main thread waits inside a collective: no exception reaches it

    def end_with(self, message: str, silent: list[int]) -> None:
        """Before this rank ends: its line, said once per host (by the first
        rank there that still answers), then SIGKILL for the silent ranks on
        this host, whose end would otherwise tell the launcher to stop this
        one before it said why."""
        here = self.peers[self.rank].hostname
        answering_here = [p.rank for p in self.peers if p.hostname == here and p.rank not in silent]
        if self.rank == min(answering_here):
            print_error(self.prog, message)
        else:
            # The rank that says why may reach its limit a moment after this
            # one (rank 0 writes each epoch's outputs after the others have
            # moved on); this rank ending first would have the launcher stop
            # that one before its line.
            time.sleep(SAYER_GRACE_S)
        self.kill_silent_ranks_here(silent)


class Off:
    """No watchdog (--stall-limit 0, elastic runs)."""

    def beat(self) -> None:
        pass

    def silent_ranks(self) -> list[int]:
        return []

    def stop(self) -> None:
        pass


@contextlib.contextmanager
def watching(limit: float, rank: int, hostname: str, allgather_object,
             network: str | None = None):
    """A Watchdog for the block (all ranks enter it together); none if
    `limit` is 0. A collective that fails inside the block while some rank
    stopped answering (Gloo's timeout) ends the rank with one line naming
    that rank instead of the error, which names nobody."""
    dog = Watchdog.start(rank, hostname, limit, allgather_object, network) if limit else Off()
    try:
        yield dog
    except Exception as err:
        silent = dog.silent_ranks()
        if not silent or isinstance(err, (UserError, RunFailed)):
            raise
        dog.end_with(f"{describe_ranks(silent, dog.peers)} stopped answering (stopped, or cut "
                     f"off), so Horovod ended the job: {first_sentence(err)}", silent)
        sys.exit(1)  # said: the error convention's RunFailed, without a second line
    finally:
        dog.stop()
