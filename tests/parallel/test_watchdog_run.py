"""The stall watchdog's parts: who it names, what it says, how it finds
rank 0 and tells a rank's process from a later one with the same pid.
Its whole behaviour (a stopped rank, a host cut off, a slow link) is
tested on the emulated hosts in test_stalls.py; here, its exit code."""

import os
import signal
import subprocess
import sys

from conftest import BIN, REPO, TRAINER, trainer_pids

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
    log_dir = tmp_path / "run"
    job = subprocess.Popen(
        [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", str(BIN / "python"),
         TRAINER, "--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "50",
         "--stall-limit", "3", "--no-progress", "--log-dir", str(log_dir)],
        cwd=REPO, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output = []
        for line in job.stdout:
            output.append(line)
            if "epoch 1:" in line:
                break
        ranks = {rank: pid for pid, rank in trainer_pids(log_dir).items()}
        os.kill(ranks[1], signal.SIGSTOP)
        output.append(job.communicate(timeout=120)[0])
    finally:
        job.kill()
    output = "".join(output)
    assert "no training step finished for 3 s on rank 0" in output, output[-3000:]
    # Rank 0 kills the stopped rank (its host's watchdog does), then exits 1.
    assert "Process 0 exit with status code 1." in output, output[-3000:]
