"""The start barrier of srun's ranks (core/start_barrier.py), with real
sockets on loopback: nobody leaves before everyone arrived, a rank that
never comes ends the others with one line each, not a hang, and only the
job's ranks count: a stray connection, a wrong token, a duplicate and a rank
out of range leave it shut."""

import hashlib
import socket
import threading
import time

import pytest

from horovod_train.core import start_barrier
from horovod_train.core.errors import RunFailed

TOKEN = "0123456789abcdef" * 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(size: int, spec: str, late: dict[int, float] | None = None,
              timeout_s: float = 10, absent: tuple[int, ...] = ()) -> dict:
    """Each rank but the absent in a thread, rank 0 the root; `late` delays
    some. What each one's call did: when it returned, or its error's line."""
    done: dict[int, object] = {}

    def rank(number: int) -> None:
        time.sleep((late or {}).get(number, 0))
        try:
            start_barrier.wait_for_every_rank(spec, number, size, number == 0, TOKEN, timeout_s)
            done[number] = time.monotonic()
        except RunFailed as err:
            done[number] = str(err)

    threads = [threading.Thread(target=rank, args=(n,)) for n in range(size) if n not in absent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s + 5)
    return done


def test_no_rank_leaves_before_the_last_one_arrives():
    spec = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    # Rank 0, which listens, late too: the others wait for it to listen.
    done = run_ranks(4, spec, late={3: 1.0, 0: 0.3})
    assert sorted(done) == [0, 1, 2, 3]
    assert all(isinstance(when, float) and when - started >= 1.0 for when in done.values()), done


def test_a_rank_that_never_comes_is_one_line_on_every_rank_within_the_timeout():
    spec = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = run_ranks(3, spec, timeout_s=1.5, absent=(2,))
    assert time.monotonic() - started < 6
    assert done[0] == f"start barrier at {spec}: 1 of the 2 other ranks arrived within 1.5 s"
    # Rank 1's own deadline, or the root's closing at the same moment.
    assert done[1] in (f"rank 1: start barrier at {spec}: not every rank arrived within 1.5 s",
                       f"rank 1: start barrier at {spec}: the first rank closed it before "
                       "every rank arrived")


def test_a_root_nobody_reaches_is_one_line():
    spec = f"127.0.0.1:{free_port()}"
    with pytest.raises(RunFailed, match=rf"^rank 1: start barrier at {spec}: Connection refused "
                                        r"for 0.5 s$"):
        start_barrier.wait_for_every_rank(spec, 1, 2, False, TOKEN, timeout_s=0.5)


def test_a_place_that_does_not_parse_is_one_line():
    with pytest.raises(RunFailed, match=r"^HVT_START_BARRIER=nowhere: want ADDRESS:PORT"):
        start_barrier.parse("nowhere")


def hello(token: str, rank: int) -> bytes:
    return start_barrier.HELLO.pack(hashlib.sha256(token.encode()).digest(), rank)


def test_only_the_jobs_ranks_count_and_the_rest_are_named(capfd, monkeypatch):
    """Rank 0 listens for a job of 3; before rank 2 comes, a silent
    connection, a wrong token, rank 1 again, rank 7 and rank 0 (the root's
    own) each knock: the barrier stays shut for rank 1 until rank 2 has come,
    and each knock is one line on the root's stderr."""
    monkeypatch.setattr(start_barrier, "HELLO_TIMEOUT_S", 0.5)  # the silent knock's wait
    spec = f"127.0.0.1:{free_port()}"
    done: dict[int, object] = {}

    def rank(number: int) -> None:
        start_barrier.wait_for_every_rank(spec, number, 3, number == 0, TOKEN, timeout_s=20)
        done[number] = time.monotonic()

    threads = [threading.Thread(target=rank, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    silent = socket.create_connection(("127.0.0.1", int(spec.rsplit(":", 1)[1])))
    for knock in (hello("another job's", 2), hello(TOKEN, 1), hello(TOKEN, 7), hello(TOKEN, 0)):
        with socket.create_connection(("127.0.0.1", int(spec.rsplit(":", 1)[1]))) as stray:
            stray.sendall(knock)
            stray.settimeout(start_barrier.HELLO_TIMEOUT_S + 3)
            assert stray.recv(1) == b""  # closed without the release
    silent.close()
    assert not done, "the barrier opened before rank 2 came"
    started = time.monotonic()
    rank(2)
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(done) == [0, 1, 2] and all(when >= started for when in done.values())
    refused = [line for line in capfd.readouterr().err.splitlines() if "refused" in line]
    assert refused == [f"start barrier at {spec}: refused a connection from 127.0.0.1: {why}"
                       for why in ("it said no hello", "not this job's token",
                                   "rank 1 has arrived already",
                                   "rank 7 is not one of the other ranks of a job of 3",
                                   "rank 0 is not one of the other ranks of a job of 3")]


def test_the_root_listens_on_the_barriers_address_alone():
    spec = f"127.0.0.2:{free_port()}"
    root = threading.Thread(target=run_ranks, args=(2, spec), kwargs={"absent": (1,),
                                                                     "timeout_s": 1})
    root.start()
    time.sleep(0.3)
    port = int(spec.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    socket.create_connection(("127.0.0.2", port), timeout=1).close()
    root.join(timeout=10)


def test_a_barrier_without_its_token_is_one_line():
    with pytest.raises(RunFailed, match=r"^HVT_START_BARRIER is set but HVT_START_BARRIER_TOKEN "
                                        r"is not \(the launcher sets both\)$"):
        start_barrier.token_of({"HVT_START_BARRIER": "10.0.0.1:50200"})
