"""The start barrier of srun's ranks (core/start_barrier.py), with real
sockets on loopback: nobody leaves before everyone arrived, and a rank that
never comes ends the others with one line each, not a hang."""

import socket
import threading
import time

import pytest

from horovod_train.core import start_barrier
from horovod_train.core.errors import RunFailed


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
            start_barrier.wait_for_every_rank(spec, number, size, number == 0, timeout_s)
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
        start_barrier.wait_for_every_rank(spec, 1, 2, False, timeout_s=0.5)


def test_a_place_that_does_not_parse_is_one_line():
    with pytest.raises(RunFailed, match=r"^HVT_START_BARRIER=nowhere: want ADDRESS:PORT"):
        start_barrier.parse("nowhere")
