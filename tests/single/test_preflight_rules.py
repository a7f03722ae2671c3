"""The preflight's rules on what the hosts said (launch/preflight.py): who
is named, for what, with which fix; the pairs' rounds; --preflight read
among launch.sh's options only. The checks themselves run for real in
tests/cluster/test_preflight.py."""

import itertools

import pytest

from horovod_train.launch import preflight
from horovod_train.launch.horovodrun import without_preflight
from horovod_train.launch.hosts import Host
from horovod_train.launch.network import pair_rounds

GIB = 1 << 30


def facts(**changes) -> dict:
    found = {"node": "a", "python": "3.11.7", "executable": "/opt/venv/bin/python",
             "cwd": "/srv/train", "checkout": {"commit": "1" * 40, "modified": False},
             "horovod": {"version": "0.28.1", "frameworks": ["pytorch"], "digest": "d1",
                         "gpu_ops": "none", "cuda": None, "cuda_archs": None},
             "torch_cuda": "13.0", "gpus": {}, "shm_bytes": 8 * GIB, "workdir": "/srv/train",
             "free_bytes": 100 * GIB}
    for key, value in changes.items():
        found[key] = {**found[key], **value} if isinstance(value, dict) else value
    return found


def named(host: Host, found: dict, here: dict | None = None) -> list[str]:
    return [str(c) for c in preflight.host_culprits(host, found, here or facts(), 1.0, 1.0)]


def test_a_host_like_this_one_is_not_named():
    assert named(Host("b", 2), facts()) == []


@pytest.mark.parametrize(("changes", "saying"), [
    ({"checkout": {"commit": "2" * 40}}, "host b: checkout at 222222222222, this host at "
                                         "111111111111: check out the same commit"),
    ({"python": "3.12.3"}, "host b: Python 3.12.3 (/opt/venv/bin/python), this host 3.11.7"),
    ({"horovod": {"digest": "d2"}}, "host b: another Horovod build (digest d2, pytorch; "
                                    "this host: digest d1, pytorch)"),
    ({"horovod": {"frameworks": ["pytorch", "tensorflow"]}}, "host b: another Horovod build"),
    ({"shm_bytes": 64 << 20}, "host b: /dev/shm is 64 MiB, below 1 GiB"),
    ({"free_bytes": GIB // 2}, "host b: 0.50 GiB free in /srv/train, below 1 GiB"),
    ({"checkout": {"error": "/srv/train is not a git checkout"}},
     "host b: /srv/train is not a git checkout (the job runs in /srv/train there)"),
])
def test_each_difference_names_the_host_and_the_fix(changes, saying):
    lines = named(Host("b", 2), facts(**changes))
    assert len(lines) == 1 and lines[0].startswith(saying), lines


def nccl_build(**gpus) -> dict:
    return facts(horovod={"gpu_ops": "nccl", "cuda": "13.0", "cuda_archs": "80,90"},
                 gpus={"driver_cuda": 13000, "driver": "580.65.06", "visible": "", "count": 2,
                       "capabilities": [[9, 0], [9, 0]], **gpus})


def test_gpus_are_checked_only_where_the_build_has_gpu_operations():
    assert named(Host("b", 4), facts(gpus={"count": 0})) == []
    assert named(Host("b", 2), nccl_build()) == []
    assert "runs 4 ranks and sees 2 GPUs" in named(Host("b", 4), nccl_build())[0]
    # Slurm's --gpus-per-task=1: the check's own task sees one GPU, as each rank does.
    assert named(Host("b", 4), nccl_build(count=1, capabilities=[[9, 0]], per_task="1")) == []
    assert "supports CUDA up to 12.8" in named(Host("b", 2), nccl_build(driver_cuda=12080))[0]
    assert "compute capability 7.0" in named(Host("b", 2),
                                             nccl_build(capabilities=[[7, 0], [7, 0]]))[0]
    no_driver = facts(horovod={"gpu_ops": "nccl"}, gpus={})
    assert "no NVIDIA driver is loaded" in named(Host("b", 1), no_driver)[0]


def test_a_cpu_build_on_a_host_with_gpus_is_named_unless_the_job_trains_on_the_cpu():
    """A venv set up on a login node without GPUs (--gpu-ops none), run on a
    GPU node: the first GPU tensor would reach a Horovod that cannot take it."""
    found = facts(gpus={"driver_cuda": 13000, "visible": "CUDA_VISIBLE_DEVICES unset",
                        "count": 4, "capabilities": [[9, 0]] * 4})
    (line,) = named(Host("b", 4), found)
    assert line.startswith("host b: this Horovod is built for the CPU alone (--gpu-ops none), "
                           "and host b has 4 GPUs (CUDA_VISIBLE_DEVICES unset): set it up with "
                           "GPU operations (scripts/setup.sh --gpu-ops nccl"), line
    assert line.endswith("or train on the CPU with --no-cuda")
    assert preflight.host_culprits(Host("b", 4), found, facts(), 1.0, 1.0, cpu_only=True) == []
    # A Horovod the project did not build records no choice: nothing to say.
    assert named(Host("b", 4), facts(horovod={"gpu_ops": None}, gpus=found["gpus"])) == []


def pairs(rates: dict[tuple[str, str], float], lost: float = 0.0) -> dict:
    found = {}
    for (a, b), rate in rates.items():
        for x, y in ((a, b), (b, a)):
            found[(x, y)] = {"mb_per_s": rate, "error": None, "rtt_ms": 0.1, "lost": lost}
    return found


def test_a_pair_below_half_the_median_pair_is_named():
    rates = {(a, b): 1000.0 for a, b in itertools.combinations("abcd", 2)}
    assert preflight.pair_culprits(pairs(rates)) == []
    rates[("c", "d")] = 200.0
    lines = [str(c) for c in preflight.pair_culprits(pairs(rates))]
    assert len(lines) == 1 and lines[0].startswith("pair c-d: 200 MB/s c to d"), lines
    # Two hosts: one pair, no median to fall below.
    assert preflight.pair_culprits(pairs({("a", "b"): 1.0})) == []


def test_a_slow_pair_is_named_only_when_it_is_slow_again():
    """A slow pair is measured a second time, alone: each direction keeps
    its faster figure, so one busy moment names nothing."""
    rates = {(a, b): 1000.0 for a, b in itertools.combinations("abcd", 2)}
    rates[("c", "d")] = 200.0
    first = pairs(rates)
    assert preflight.slow_pairs(first) == ([("c", "d")], 1000.0)
    busy_moment = preflight.the_faster_of(first, pairs({("c", "d"): 900.0}))
    assert busy_moment[("d", "c")]["mb_per_s"] == 900.0
    assert preflight.pair_culprits(busy_moment) == []
    slow_link = preflight.the_faster_of(first, pairs({("c", "d"): 150.0}))
    assert slow_link[("c", "d")]["mb_per_s"] == 200.0
    assert str(preflight.pair_culprits(slow_link)[0]).startswith("pair c-d: 200 MB/s")


def test_a_slow_pair_is_held_to_the_median_pair_measured_in_the_same_moment():
    """A host kept busy slows every pair alike: the slow pair measured again
    is named only when it stays below half the median pair measured again
    right after it."""
    rates = {(a, b): 1000.0 for a, b in itertools.combinations("abcd", 2)}
    rates[("a", "b")], rates[("c", "d")] = 990.0, 300.0
    first = pairs(rates)
    slow, median = preflight.slow_pairs(first)
    reference = preflight.median_pair(first, slow, median)
    assert slow == [("c", "d")] and reference in rates and reference != ("c", "d")
    busy_host = pairs({("c", "d"): 350.0, reference: 600.0})
    cleared = preflight.cleared_pairs(busy_host, slow, reference)
    assert cleared == [("c", "d")]
    assert preflight.pair_culprits(preflight.the_faster_of(first, busy_host), cleared) == []
    slow_link = pairs({("c", "d"): 250.0, reference: 1000.0})
    assert preflight.cleared_pairs(slow_link, slow, reference) == []
    assert len(preflight.pair_culprits(preflight.the_faster_of(first, slow_link), [])) == 1
    # The yardstick failed to measure: the first look stands.
    failed = {**slow_link, reference: {"mb_per_s": None, "error": "refused", "lost": 1}}
    assert preflight.cleared_pairs(failed, slow, reference) == []
    assert preflight.median_pair(first, slow, median) != ("a", "b")  # 990: 1000 is nearer
    # Two slow pairs as far from the median as two fast ones: the yardstick
    # is a fast one, never a slow pair held to itself.
    split = pairs({("a", "b"): 1.0, ("a", "c"): 1.0, ("a", "d"): 100.0, ("b", "c"): 100.0})
    split_slow, split_median = preflight.slow_pairs(split)
    assert split_slow == [("a", "b"), ("a", "c")]
    assert preflight.median_pair(split, split_slow, split_median) == ("a", "d")


def test_a_pair_that_loses_datagrams_or_cannot_send_is_named():
    lossy = pairs({("a", "b"): 1000.0}, lost=0.05)
    assert "loses datagrams (5% a to b, 5% b to a)" in str(preflight.pair_culprits(lossy)[0])
    failed = pairs({("a", "b"): 1000.0})
    failed[("a", "b")] = {"mb_per_s": None, "error": "measuring 10.0.0.2: refused", "lost": 1}
    assert str(preflight.pair_culprits(failed)[0]) == ("pair a-b: cannot send a to b: "
                                                       "measuring 10.0.0.2: refused")


def test_a_clock_is_named_only_when_surely_more_than_a_second_off():
    assert preflight.clock_culprits({"b": (1.2, 0.3), "c": (-0.5, 0.01)}) == []
    line = str(preflight.clock_culprits({"b": (-2.5, 0.01)})[0])
    assert line.startswith("host b: its clock is 2.5 s behind this host's")


def test_a_host_checks_line_is_its_culprit():
    line = str(preflight.ssh_culprit("c", "host c: ssh fails (Permission denied): this host's "
                                          "key is not accepted there: add it (ssh-copy-id c)"))
    assert line == ("host c: ssh fails (Permission denied): this host's key is not accepted "
                    "there: add it (ssh-copy-id c)")
    resolve = preflight.ssh_culprit("c", "host c does not resolve: Name or service not known")
    assert str(resolve) == "host c: does not resolve: Name or service not known"


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8])
def test_the_rounds_hold_every_pair_once_and_each_node_once_a_round(nodes):
    names = [f"n{i}" for i in range(nodes)]
    rounds = pair_rounds(names)
    assert len(rounds) == nodes - (nodes % 2 == 0)
    flat = sorted(tuple(sorted(pair)) for pairs_ in rounds for pair in pairs_)
    assert flat == sorted(itertools.combinations(names, 2))
    for pairs_ in rounds:
        members = [node for pair in pairs_ for node in pair]
        assert len(members) == len(set(members))


def test_preflight_is_read_among_the_launchers_options_only():
    assert without_preflight(["--preflight", "-np", "2", "python", "x.py"]) == (
        True, ["-np", "2", "python", "x.py"])
    assert without_preflight(["-np", "2", "python", "x.py", "--preflight"]) == (
        False, ["-np", "2", "python", "x.py", "--preflight"])
