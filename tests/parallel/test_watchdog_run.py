"""The stall watchdog's parts: who it names, what it says, how it finds
rank 0 and tells a rank's process from a later one with the same pid.
Its whole behaviour (a stopped rank, a host cut off, a slow link) is
tested on the emulated hosts in test_stalls.py; here, its exit code."""

import os
import signal
import subprocess
import sys

from conftest import signal_rank_after_epoch_1

from horovod_train.core import watchdog


def test_a_process_is_told_from_a_later_one_with_its_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = watchdog.process_start_time(child.pid)
        assert started and started != watchdog.process_start_time(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert watchdog.process_start_time(child.pid) == ""  # gone: nothing to kill by mistake


def test_a_stalled_job_ends_its_ranks_with_exit_1(small_mnist_dir, tmp_path):
    """Two ranks here, rank 1 stopped (SIGSTOP) once training runs: rank 0's
    watchdog ends the job after --stall-limit with its one line and exit 1,
    the code of a run that started and failed (horovodrun reports each
    rank's)."""
    _, output, _ = signal_rank_after_epoch_1("pytorch_mnist.py", small_mnist_dir,
                                             tmp_path / "run", signal.SIGSTOP,
                                             "--stall-limit", "3")
    assert "no training step finished for 3 s on rank 0" in output, output[-3000:]
    # Rank 0 kills the stopped rank (its host's watchdog does), then exits 1.
    assert "Process 0 exit with status code 1." in output, output[-3000:]
