"""The stall watchdog's parts: who it names, what it says, how it finds
rank 0 and tells a rank's process from a later one with the same pid.
Its whole behaviour (a stopped rank, a host cut off, a slow link) is
tested on the emulated hosts in test_stalls.py."""

import socket

import pytest

from horovod_train.core import watchdog
from horovod_train.core.errors import RunFailed
from horovod_train.torch import options as torch_options

# Ranks 0 and 1 on host a, 2 and 3 on host b; rank 0 listens for heartbeats.
PEERS = [watchdog.Peer(0, "a", 10, "1", ("10.0.0.1",), 5000),
         watchdog.Peer(1, "a", 11, "1", (), 0),
         watchdog.Peer(2, "b", 12, "1", (), 0),
         watchdog.Peer(3, "b", 13, "1", (), 0)]


def test_silent_ranks_are_named_by_host():
    assert watchdog.describe_ranks([3], PEERS) == "rank 3 on host b"
    assert watchdog.describe_ranks([3, 2], PEERS) == "ranks 2, 3 on host b"
    assert watchdog.describe_ranks([0, 2, 3], PEERS) == "rank 0 on host a and ranks 2, 3 on host b"


def test_the_stall_line_says_who_stopped_answering_and_the_limit():
    line = watchdog.stall_message(60, [2, 3], PEERS, me=0)
    assert line == ("no training step finished for 60 s on rank 0 (host a): ranks 2, 3 on host "
                    "b stopped answering (stopped, or cut off); ending the job (--stall-limit 60)")


def test_with_every_rank_answering_the_line_points_outside_horovod():
    line = watchdog.stall_message(7.5, [], PEERS, me=2)
    assert line.startswith("no training step finished for 7.5 s on rank 2 (host b): every rank "
                           "still answers")


def test_rank_0_is_found_at_one_of_its_host_addresses():
    # The loopback interface always has one; the others depend on the host.
    assert "127.0.0.1" in watchdog.host_addresses()


def test_rank_0_listens_on_the_jobs_network_inside_hvt_ports(monkeypatch):
    """A real socket: the job's network is loopback here, the range around a
    port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        low = taken.getsockname()[1]
        monkeypatch.setenv("HVT_PORTS", f"{low}-{low + 20}")
        # Its first port is still taken: the next free one of the range.
        dog = watchdog.Watchdog.start(0, "a", 60, lambda mine, name: [mine], network="lo")
    try:
        address, port = dog.sock.getsockname()
        assert address == "127.0.0.1" and low < port <= low + 20
        assert dog.peers[0].addresses == ("127.0.0.1",) and dog.peers[0].port == port
    finally:
        dog.stop()


def test_a_range_with_no_free_port_is_one_line_naming_hvt_ports(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as first, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as second:
        first.bind(("127.0.0.1", 0))
        low = first.getsockname()[1]
        try:
            second.bind(("127.0.0.1", low + 1))
        except OSError:
            pytest.skip(f"port {low + 1} is taken by another process")
        monkeypatch.setenv("HVT_PORTS", f"{low}-{low + 1}")
        with pytest.raises(RunFailed) as failed:
            watchdog.Watchdog.start(0, "a", 60, lambda mine, name: [mine], network="lo")
    assert str(failed.value) == ("stall watchdog: cannot listen on 127.0.0.1 inside HVT_PORTS: "
                                 "Address already in use")


def test_without_a_network_rank_0_listens_everywhere():
    assert watchdog.network_address(None) is None
    assert watchdog.network_address("no-such-interface") is None
    assert watchdog.network_address("lo,eth0") == "127.0.0.1"


@pytest.mark.parametrize("value,accepted", [("0", True), ("2.5", True), ("-1", False),
                                            ("soon", False)])
def test_the_stall_limit_is_seconds_or_0_for_off(value, accepted, capsys):
    if accepted:
        config = torch_options.parse_args(["--stall-limit", value])
        assert config.horovod.stall_limit == float(value)
    else:
        with pytest.raises(SystemExit) as ended:
            torch_options.parse_args(["--stall-limit", value])
        assert ended.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1
