"""The soak: the two-host command (4 ranks on a:2,b:2, 1 epoch) run again
and again, alternating Gloo and MPI, then runs with a random fault at a
random moment, each of which must end as its case says (tests/faults.py)
with nothing corrupted.

CI runs the short soak, 1 fault (the two-host command itself, over Gloo and
MPI, is tests/cluster/test_pytorch_mnist_cluster.py's); the long one is

    scripts/test.sh tests/cluster/test_soak.py --soak-runs 20 --soak-faults 10
"""

import random
import statistics
import subprocess
import time

import faults
import pytest
from conftest import assert_trained, horovodrun, mounted_tmpfs

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

CASES = ("stopped rank", "b cut off", "slow link", "ssh closed on b", "disk full")
# How long the slow link lasts: several slowed steps.
SLOW_FOR_S = 10


def test_consecutive_runs_all_succeed(cluster, mnist_dir, tmp_path, request):
    runs = request.config.getoption("--soak-runs")
    if runs < 1:
        pytest.skip("the long soak's (--soak-runs N); the two-host runs of CI are "
                    "test_pytorch_mnist_cluster.py's")
    wall = []
    for i in range(runs):
        controller = ("gloo", "mpi")[i % 2]
        started = time.monotonic()
        run = horovodrun(["-np", "4", "-H", "a:2,b:2", f"--{controller}"],
                         ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "1"],
                         tmp_path / f"run{i}", host="a")
        wall.append(time.monotonic() - started)
        assert_trained(run, 4, controller, {"a": 2, "b": 2}, min_accuracy=0.9)
    print(f"{runs} runs, wall time min {min(wall):.1f} s, median {statistics.median(wall):.1f} s, "
          f"max {max(wall):.1f} s: " + ", ".join(f"{w:.1f}" for w in wall))


@pytest.fixture
def fault_disk(tmp_path):
    """A 16 MiB tmpfs for the disk-full case, which fills it mid-run."""
    yield from mounted_tmpfs(tmp_path / "disk", "16m")


def test_random_faults_each_end_as_their_case_says(cluster, mnist_dir, small_mnist_dir,
                                                   tmp_path, fault_disk, request):
    seed = request.config.getoption("--soak-seed")
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    print(f"--soak-seed {seed}")
    # Every case once in each round of five, in a random order.
    cases = [case for _ in range(request.config.getoption("--soak-faults"))
             for case in rng.sample(CASES, len(CASES))]
    for i in range(request.config.getoption("--soak-faults")):
        case, controller = cases[i], rng.choice(("gloo", "mpi"))
        after_s = round(rng.uniform(0, 5), 1)  # after the first steps
        log_dir = tmp_path / f"fault{i}"
        print(f"fault {i}: {case}, {controller}, {after_s} s into training")
        if case == "stopped rank":
            said = faults.stopped_rank(controller, small_mnist_dir, log_dir, after_s)
        elif case == "b cut off":
            said = faults.cut_off_b(controller, small_mnist_dir, log_dir, after_s)
        elif case == "slow link":
            # Its run trains only about 4 s unslowed: the fault within 2 s.
            # Slowed for SLOW_FOR_S only: the run's later steps would be as
            # slow as those, adding time and nothing to check.
            said = faults.slow_link(controller, mnist_dir, log_dir, round(after_s * 0.4, 1),
                                    slow_for_s=SLOW_FOR_S, epochs=2)
        elif case == "ssh closed on b":
            said = faults.ssh_closed_on_b(controller, small_mnist_dir, log_dir)
        else:
            for left in fault_disk.iterdir():
                subprocess.run(["rm", "-rf", str(left)], check=True)
            said = faults.disk_full(controller, small_mnist_dir, fault_disk, after_s)
        print(f"  {said}")
