"""A rank killed with SIGKILL in a normal (not elastic) 4-rank run on a:2,b:2:
horovodrun exits non-zero within a minute naming the rank, no trainer
process is left on any host, the last checkpoint is whole, and --resume
goes on from it."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, REPO, TRAINER, horovodrun, on_host, trainer_pids

from horovod_train.torch import checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DETECT_BOUND_S = 60
# Killed in the last epoch, once the one before is checkpointed; --resume
# then trains that last epoch alone.
EPOCHS = 2
# The resumed run's least test accuracy: its last epoch from the
# checkpoint's weights ends above it, from fresh weights (a resume that lost
# them) below it.
RESUMED_ACCURACY = 0.95


def epochs_checkpointed(log_dir: Path) -> int:
    path = checkpoint.checkpoint_path(log_dir / "checkpoints")
    return checkpoint.load(path)["epochs_done"] if path.exists() else 0


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_a_killed_rank_ends_the_job_fast_and_resume_goes_on(controller, cluster, mnist_dir,
                                                           tmp_path):
    log_dir = tmp_path / "run"
    trainer_args = ["--data-dir", str(mnist_dir), "--no-download", "--no-progress",
                    "--log-dir", str(log_dir), "--epochs", str(EPOCHS)]
    launch = ["-np", "4", "-H", "a:2,b:2", f"--{controller}"]
    command = [str(BIN / "horovodrun"), *launch, str(BIN / "python"), TRAINER, *trainer_args]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    job = subprocess.Popen(on_host("a", command), cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        # Killed once the last epoch's predecessor is checkpointed (atomically:
        # a read sees the old file or the new one), so what resume must find
        # is known.
        while epochs_checkpointed(log_dir) < EPOCHS - 1:
            assert job.poll() is None, job.stdout.read()[-3000:]
            assert time.monotonic() < deadline, f"no checkpoint of epoch {EPOCHS - 1} within 300 s"
            time.sleep(0.2)
        # A rank on host b: the one whose loss the launcher on a must notice.
        ranks = trainer_pids(log_dir)
        victim_pid, victim_rank = max(ranks.items(), key=lambda item: item[1])
        assert victim_rank == 3 and len(ranks) == 4, ranks
        os.kill(victim_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        output, _ = job.communicate(timeout=DETECT_BOUND_S + 30)
        detected_s = time.monotonic() - killed_at
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode != 0
    assert detected_s < DETECT_BOUND_S, f"{detected_s:.0f} s"
    if controller == "mpi":
        assert "rank 3" in output and "signal 9" in output, output[-3000:]
    else:
        # Horovod names the first rank to exit (through ssh: 255, or 137 locally).
        assert "The first process to do so was:\nProcess name: 3\n" in output, output[-3000:]
    # The ranks left say so in one line each, not in a traceback.
    assert not re.search(r"^\[[\d,]+\]<stderr>:Traceback", output, re.M), output[-3000:]
    # The other ranks are ended by horovodrun, over ssh for host b: give
    # them a few seconds, then none may be left.
    gone_by = time.monotonic() + 10
    while trainer_pids(log_dir) and time.monotonic() < gone_by:
        time.sleep(0.5)
    assert trainer_pids(log_dir) == {}, "trainer processes left behind 10 s after horovodrun ended"

    saved = checkpoint.load(checkpoint.checkpoint_path(log_dir / "checkpoints"))
    assert saved["epochs_done"] == EPOCHS - 1
    resumed = horovodrun(["-np", "4", "-H", "a:2,b:2", f"--{controller}"],
                         [*trainer_args[:3], "--epochs", str(EPOCHS), "--resume"], log_dir,
                         host="a")
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert f"resuming after epoch {saved['epochs_done']}" in resumed.output
    assert resumed.summary["resumed_after_epoch"] == saved["epochs_done"]
    assert resumed.summary["test_accuracy"] >= RESUMED_ACCURACY, resumed.summary["test_accuracy"]
    print(f"{controller}: rank 3 killed during epoch {saved['epochs_done'] + 1}, "
          f"horovodrun exited {job.returncode} after {detected_s:.1f} s")
