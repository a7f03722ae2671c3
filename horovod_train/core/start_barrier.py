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
of HVT_PORTS, on the first node's address on the chosen network); the
first rank of the node with that address listens there.

Standard library only."""

import socket
import struct
import time

from horovod_train.core.errors import RunFailed

TIMEOUT_S = 300  # srun ends every rank once one of them fails: this is a backstop
RETRY_S = 0.2
RELEASE = b"\x01"


def parse(spec: str) -> tuple[str, int]:
    """HVT_START_BARRIER's ADDRESS:PORT."""
    address, _, port = spec.rpartition(":")
    if not address or not port.isdigit():
        raise RunFailed(f"HVT_START_BARRIER={spec}: want ADDRESS:PORT (the launcher sets it)")
    return address, int(port)


def wait_for_every_rank(spec: str, rank: int, size: int, is_root: bool,
                        timeout_s: float = TIMEOUT_S) -> None:
    """Return once all `size` ranks have called this; `is_root` for the one
    rank that listens (the first on the barrier's node)."""
    address, port = parse(spec)
    deadline = time.monotonic() + timeout_s
    if is_root:
        gather_then_release(port, size - 1, deadline, f"start barrier at {spec}", timeout_s)
    else:
        check_in(address, port, rank, deadline, f"rank {rank}: start barrier at {spec}",
                 timeout_s)


def gather_then_release(port: int, others: int, deadline: float, where: str,
                        timeout_s: float) -> None:
    try:
        server = socket.create_server(("0.0.0.0", port), backlog=max(16, others))
    except OSError as err:
        raise RunFailed(f"{where}: cannot listen: {err.strerror or err}") from None
    arrived: dict[int, socket.socket] = {}
    with server:
        try:
            while len(arrived) < others:
                server.settimeout(max(0.0, deadline - time.monotonic()))
                try:
                    peer, _ = server.accept()
                except TimeoutError:
                    raise RunFailed(f"{where}: {len(arrived)} of the {others} other ranks "
                                    f"arrived within {timeout_s:g} s") from None
                peer.settimeout(max(1.0, deadline - time.monotonic()))
                try:
                    said = receive_exactly(peer, 4)
                except OSError:
                    said = b""
                if len(said) < 4:  # not a rank (it closed, or said nothing in time)
                    peer.close()
                    continue
                (rank,) = struct.unpack("!I", said)
                if rank in arrived:
                    arrived[rank].close()
                arrived[rank] = peer
            for peer in arrived.values():
                peer.sendall(RELEASE)
        finally:
            for peer in arrived.values():
                peer.close()


def check_in(address: str, port: int, rank: int, deadline: float, where: str,
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
            peer.sendall(struct.pack("!I", rank))
            peer.settimeout(max(1.0, deadline - time.monotonic()))
            released = receive_exactly(peer, 1)
        except TimeoutError:
            raise RunFailed(f"{where}: not every rank arrived within {timeout_s:g} s") from None
        except OSError as err:
            raise RunFailed(f"{where}: {err.strerror or err}") from None
    if released != RELEASE:
        raise RunFailed(f"{where}: the first rank closed it before every rank arrived")


def receive_exactly(peer: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = peer.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data
