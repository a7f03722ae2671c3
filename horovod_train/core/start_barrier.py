"""Every rank past MPI_Init before any rank sends: a barrier over TCP for
ranks that srun starts while Slurm's PMIx servers reach each other through
slurmd (SLURM_PMIX_DIRECT_CONN=false, set where HVT_PORTS names the ports a
firewall opens).

Why: Open MPI 4.1's MPI_Init waits in two PMIx fences, and Slurm's PMIx
(22.05) completes a fence on each node without the others when it runs
through slurmd (its step logs show the collective with no children). The
ranks of a node that started first then leave MPI_Init and send to a rank
of another node still in it, whose Open MPI has no handler for the message
yet: a segmentation fault in MPI_Init. So such a rank starts MPI itself,
waits here until every rank has, and only then starts Horovod, which sends.

The launcher names the place (HVT_START_BARRIER=ADDRESS:PORT, the last port
of HVT_PORTS, on the first node's address on the chosen network) and a
secret of the job (HVT_START_BARRIER_TOKEN, in the ranks' environment, never
on a command line); the first rank of the node with that address listens on
that address alone. It counts a connection as a rank only when it says the
job's token and a rank of the job that has not arrived yet, within a few
seconds: a stray connection, another job on the node or a duplicate is
closed and named on stderr, and the barrier stays shut until every rank
has come.

No framework: the standard library, and core's errors and interfaces."""

import hashlib
import hmac
import os
import socket
import struct
import sys
import time

from horovod_train.core.errors import RunFailed
from horovod_train.core.interfaces import receive_exactly

TIMEOUT_S = 300  # srun ends every rank once one of them fails: this is a backstop
HELLO_TIMEOUT_S = 5.0  # a connection that says nothing holds the others this long at most
RETRY_S = 0.2
RELEASE = b"\x01"
# A hello: the token's digest (a fixed length, whatever the token's), then the rank.
HELLO = struct.Struct("!32sI")


def parse(spec: str) -> tuple[str, int]:
    """HVT_START_BARRIER's ADDRESS:PORT."""
    address, _, port = spec.rpartition(":")
    if not address or not port.isdigit():
        raise RunFailed(f"HVT_START_BARRIER={spec}: want ADDRESS:PORT (the launcher sets it)")
    return address, int(port)


def token_of(env: dict = os.environ) -> str:
    """HVT_START_BARRIER_TOKEN, which the launcher sets beside HVT_START_BARRIER."""
    token = env.get("HVT_START_BARRIER_TOKEN", "")
    if not token:
        raise RunFailed("HVT_START_BARRIER is set but HVT_START_BARRIER_TOKEN is not "
                        "(the launcher sets both)")
    return token


def wait_for_every_rank(spec: str, rank: int, size: int, is_root: bool, token: str,
                        timeout_s: float = TIMEOUT_S) -> None:
    """Return once all `size` ranks have called this with the job's `token`;
    `is_root` for the one rank that listens (the first on the barrier's
    node)."""
    address, port = parse(spec)
    deadline = time.monotonic() + timeout_s
    digest = hashlib.sha256(token.encode()).digest()
    if is_root:
        gather_then_release(address, port, rank, size, digest, deadline,
                            f"start barrier at {spec}", timeout_s)
    else:
        check_in(address, port, HELLO.pack(digest, rank), deadline,
                 f"rank {rank}: start barrier at {spec}", timeout_s)


def gather_then_release(address: str, port: int, root_rank: int, size: int, digest: bytes,
                        deadline: float, where: str, timeout_s: float) -> None:
    others = size - 1
    try:
        server = socket.create_server((address, port), backlog=max(16, others))
    except OSError as err:
        raise RunFailed(f"{where}: cannot listen: {err.strerror or err}") from None
    arrived: dict[int, socket.socket] = {}
    with server:
        try:
            while len(arrived) < others:
                server.settimeout(max(0.0, deadline - time.monotonic()))
                try:
                    peer, (sender, _) = server.accept()
                except TimeoutError:
                    raise RunFailed(f"{where}: {len(arrived)} of the {others} other ranks "
                                    f"arrived within {timeout_s:g} s") from None
                rank, refused = read_hello(peer, digest, root_rank, size, arrived, deadline)
                if refused:
                    peer.close()
                    print(f"{where}: refused a connection from {sender}: {refused}",
                          file=sys.stderr, flush=True)
                    continue
                arrived[rank] = peer
            for peer in arrived.values():
                peer.sendall(RELEASE)
        finally:
            for peer in arrived.values():
                peer.close()


def read_hello(peer: socket.socket, digest: bytes, root_rank: int, size: int,
               arrived: dict, deadline: float) -> tuple[int, str]:
    """The rank a connection says it is, and why it is not one of the job's
    ranks yet to come ("" if it is)."""
    peer.settimeout(max(0.1, min(HELLO_TIMEOUT_S, deadline - time.monotonic())))
    try:
        said = receive_exactly(peer, HELLO.size)
    except OSError:
        said = b""
    if len(said) < HELLO.size:
        return -1, "it said no hello"
    token_digest, rank = HELLO.unpack(said)
    if not hmac.compare_digest(token_digest, digest):
        return rank, "not this job's token"
    if rank >= size or rank == root_rank:
        return rank, f"rank {rank} is not one of the other ranks of a job of {size}"
    if rank in arrived:
        return rank, f"rank {rank} has arrived already"
    return rank, ""


def check_in(address: str, port: int, hello: bytes, deadline: float, where: str,
             timeout_s: float) -> None:
    # The first rank may not listen yet: try again until it does.
    while True:
        try:
            peer = socket.create_connection((address, port), timeout=RETRY_S * 10)
            break
        except OSError as err:
            if time.monotonic() >= deadline:
                raise RunFailed(f"{where}: {err.strerror or err} for {timeout_s:g} s") from None
            time.sleep(RETRY_S)
    with peer:
        try:
            peer.sendall(hello)
            peer.settimeout(max(1.0, deadline - time.monotonic()))
            released = receive_exactly(peer, 1)
        except TimeoutError:
            raise RunFailed(f"{where}: not every rank arrived within {timeout_s:g} s") from None
        except OSError as err:
            raise RunFailed(f"{where}: {err.strerror or err}") from None
    if released != RELEASE:
        raise RunFailed(f"{where}: the first rank closed it before every rank arrived")
