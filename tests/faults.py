"""Faults injected into the two-host job (4 ranks on a:2,b:2, launched from
a) and how each must end. test_stalls.py runs each case once at a fixed
moment, test_soak.py at random moments; both through these functions.

Each case returns a line for the test's output: what happened, how fast."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, EMULATE, REPO, TRAINER, host_processes, on_host, trainer_pids

from horovod_train.emulation.cluster import SSH_DEFAULT_PORT
from horovod_train.torch import checkpoint

STALL_LIMIT_S = 10  # the tests' --stall-limit (60 s by default), to keep them short
# mpirun's keepalive to its daemons, probed after 2 s of silence, every 1 s,
# 2 unanswered: a lost host noticed within about 4 s instead of the
# project's 25 s (docker/openmpi-mca-params.conf: 10, 5, 3).
SHORT_KEEPALIVE = {"OMPI_MCA_oob_tcp_keepalive_time": "2", "OMPI_MCA_oob_tcp_keepalive_intvl": "1",
                   "OMPI_MCA_oob_tcp_keepalive_probes": "2"}
# The limit (or Gloo's timeout), then the launcher's teardown, with room for
# a busy machine; the point is that the job ends at all.
END_BOUND_S = 60
LAUNCH = REPO / "scripts" / "launch.sh"


class Job:
    """The trainer on a:2,b:2 under scripts/launch.sh (horovodrun, its input
    checked first) on host a, its output in a file (beside the log dir
    unless given)."""

    def __init__(self, controller: str, trainer_args: list[str], log_dir: Path,
                 env: dict | None = None, output_path: Path | None = None):
        self.log_dir = log_dir
        self.output_path = output_path or log_dir.parent / f"{log_dir.name}.out"
        command = [str(LAUNCH), "-np", "4", "-H", "a:2,b:2", f"--{controller}",
                   str(BIN / "python"), TRAINER, "--log-dir", str(log_dir),
                   "--progress-every", "0.2", *trainer_args]
        env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **(env or {})}
        self.started = time.monotonic()
        with self.output_path.open("w") as out:
            self.process = subprocess.Popen(on_host("a", command), cwd=REPO, env=env,
                                            stdout=out, stderr=subprocess.STDOUT)

    @property
    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def wait_for_training(self, then_s: float = 0.0, timeout: float = 120) -> None:
        """Until rank 0's first progress or epoch line (every rank is in its
        steps), and `then_s` seconds more."""
        deadline = time.monotonic() + timeout
        while "batches/s" not in self.output and "epoch 1:" not in self.output:
            assert self.process.poll() is None, self.output[-3000:]
            assert time.monotonic() < deadline, f"no progress in {timeout} s"
            time.sleep(0.2)
        time.sleep(then_s)
        assert self.process.poll() is None, "ended before the fault:\n" + self.output[-3000:]

    def wait(self, timeout: float) -> float:
        """The seconds until the launcher ended (killed past `timeout`)."""
        started = time.monotonic()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the job did not end within {timeout} s:\n{self.output[-3000:]}")
        return time.monotonic() - started


def job_processes(host: str, log_dir: Path) -> list[str]:
    """Processes of the job in a host's namespace: its ranks, the shells
    ssh started for them, OpenMPI's daemon, the launcher on a."""
    return [f"{pid}: {cmdline[:200]}" for pid, cmdline in host_processes(host).items()
            if str(log_dir) in cmdline or "orted" in cmdline]


def assert_nothing_left(log_dir: Path, hosts: tuple[str, ...] = ("a", "b"),
                        within_s: float = 15) -> None:
    def left() -> dict:
        return {host: found for host in hosts if (found := job_processes(host, log_dir))}

    deadline = time.monotonic() + within_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left() == {}, f"processes of the job left {within_s:g} s after it ended"


def error_line(output: str, saying: str) -> str:
    """The trainer's error line that says `saying`; none may be a traceback
    of the trainer's."""
    assert "<stderr>:Traceback" not in output, output[-3000:]
    lines = [line for line in output.splitlines()
             if "pytorch_mnist.py: error:" in line and saying in line]
    assert lines, f"no error line saying {saying!r}:\n{output[-3000:]}"
    return lines[0].split("]<stderr>:")[-1]


def assert_outputs_whole(log_dir: Path) -> None:
    """Whatever the fault, the checkpoint on disk loads and every metrics
    line is whole JSON (a line the disk cut short has no newline and is
    the only one allowed to fail)."""
    saved = checkpoint.checkpoint_path(log_dir / "checkpoints")
    if saved.exists():
        checkpoint.load(saved)
    metrics = log_dir / "metrics.jsonl"
    if metrics.exists():
        text = metrics.read_text()
        for line in text.splitlines(keepends=True):
            if line.endswith("\n"):
                json.loads(line)


def training_args(data_dir: Path, *more: str) -> list[str]:
    # Epochs enough to be training when the fault comes, whenever it comes
    # (a fifth of a second each with the 1,600 digits of small_mnist_dir).
    return ["--data-dir", str(data_dir), "--no-download", "--epochs", "200", *more]


# --- the cases ---------------------------------------------------------------------

def stopped_rank(controller: str, data_dir: Path, log_dir: Path, after_s: float = 0.0,
                 env: dict | None = None, trainer_limit: float = STALL_LIMIT_S) -> str:
    """Rank 3 (on b) stopped with SIGSTOP: the job ends naming it, and the
    stopped process is gone too (killed by its host's other rank: a stopped
    process would outlive the job, Gloo's driver only closes its ssh)."""
    job = Job(controller, training_args(data_dir, "--stall-limit", str(trainer_limit)),
              log_dir, env)
    job.wait_for_training(after_s)
    ranks = {rank: pid for pid, rank in trainer_pids(log_dir).items()}
    os.kill(ranks[3], signal.SIGSTOP)
    ended_s = job.wait(END_BOUND_S)
    line = error_line(job.output, "rank 3 on host b stopped answering")
    assert job.process.returncode != 0
    assert_nothing_left(log_dir)
    assert_outputs_whole(log_dir)
    return f"stopped rank ({controller}): ended {ended_s:.1f} s after the SIGSTOP: {line}"


def cut_off_b(controller: str, data_dir: Path, log_dir: Path, after_s: float = 0.0,
              env: dict | None = None) -> str:
    """b's link down, no process killed: the job ends on a naming b (over
    MPI mpirun's keepalive to its daemon on b notices first, within 25 s at
    the project's settings; over Gloo its timeout, 30 s by default, and the
    trainer names b's ranks), nothing of it is left on a, and nothing on b
    once its link is back."""
    job = Job(controller, training_args(data_dir), log_dir, env)
    job.wait_for_training(after_s)
    link = ["ip", "-n", "hvt-b", "link", "set", "eth0"]
    subprocess.run([*link, "down"], check=True)
    try:
        ended_s = job.wait(END_BOUND_S)
        if controller == "mpi":
            line = next((line for line in job.output.splitlines()
                         if line.strip().startswith("Remote daemon:") and "on node b" in line),
                        None)
            assert line, job.output[-3000:]
        else:
            line = error_line(job.output, "ranks 2, 3 on host b stopped answering")
        assert job.process.returncode != 0
        assert_nothing_left(log_dir, hosts=("a",))
    finally:
        subprocess.run([*link, "up"], check=True)
    assert_nothing_left(log_dir, within_s=30)
    assert_outputs_whole(log_dir)
    return f"b cut off ({controller}): ended {ended_s:.1f} s after its link went down: {line}"


def shaped_traffic(hosts: tuple[str, ...] = ("a", "b")) -> tuple[int, int]:
    """The bytes the hosts' shaped links (tc tbf on eth0) have sent, and how
    often the shaper held a packet back (its overlimits)."""
    sent = held = 0
    for host in hosts:
        stats = subprocess.run(["tc", "-s", "-n", f"hvt-{host}", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, check=True, timeout=30).stdout
        counters = re.search(r"Sent (\d+) bytes .*overlimits (\d+)", stats)
        assert counters, stats
        sent, held = sent + int(counters[1]), held + int(counters[2])
    return sent, held


# A step's gradients: mnist_cnn's, in float32.
GRADIENT_BYTES = 1_600_000


def slow_link(controller: str, data_dir: Path, log_dir: Path, after_s: float = 0.0,
              slow_for_s: float = 8.0, epochs: int = 3) -> str:
    """Every link at 10 Mbit/s mid-run for `slow_for_s` seconds (or to the
    end of the run, if sooner), at the default limits (Gloo's 30 s timeout,
    the trainer's 60 s): the run finishes, every rank with the same
    weights. The shaper's own counters show that the ranks trained through
    it meanwhile: their gradients went through the slowed links, which held
    packets back. A step then takes about a second."""
    job = Job(controller, ["--data-dir", str(data_dir), "--no-download", "--epochs",
                           str(epochs)], log_dir)
    job.wait_for_training(after_s)
    shape = [str(EMULATE), "shape"]
    subprocess.run([*shape, "--rate", "10mbit"], check=True, capture_output=True, timeout=60)
    slowed = time.monotonic()
    try:
        # Still training after slow_for_s: the link comes back for the rest.
        with contextlib.suppress(subprocess.TimeoutExpired):
            job.process.wait(timeout=slow_for_s)
        sent, held = shaped_traffic()
    finally:
        subprocess.run([*shape, "--off"], check=True, capture_output=True, timeout=60)
    job.wait(600)
    ended_s = time.monotonic() - slowed
    assert job.process.returncode == 0, job.output[-3000:]
    assert sent > 2 * GRADIENT_BYTES and held > 0, (sent, held)
    summary = json.loads((log_dir / "summary.json").read_text())
    assert summary["weights_identical"], summary["rank_digests"]
    return (f"slow link ({controller}): finished {ended_s:.1f} s after the link slowed (for "
            f"{slow_for_s:g} s: {sent / 1e6:.1f} MB through it, held back {held} times), "
            f"{summary['train_time_s']:.1f} s of training, weights identical")


def ssh_closed_on_b(controller: str, data_dir: Path, log_dir: Path) -> str:
    """b's SSH port refused by a firewall rule inside b: the launcher says
    so in one line within 30 s, before any rank starts."""
    iptables_in_b = ["ip", "netns", "exec", "hvt-b", "iptables"]
    rule = ["INPUT", "-p", "tcp", "--dport", str(SSH_DEFAULT_PORT), "-j", "REJECT",
            "--reject-with", "tcp-reset"]
    subprocess.run([*iptables_in_b, "-A", *rule], check=True, timeout=30)
    try:
        job = Job(controller, training_args(data_dir), log_dir)
        ended_s = job.wait(30)
    finally:
        subprocess.run([*iptables_in_b, "-D", *rule], check=True, timeout=30)
    assert job.process.returncode == 2
    said = job.output.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(
        f"launch: error: cannot reach host b on SSH port {SSH_DEFAULT_PORT}: "
        "connection refused"), said
    assert not log_dir.exists()  # no rank started
    return f"ssh closed on b ({controller}): {ended_s:.1f} s: {said[0]}"


def disk_full(controller: str, data_dir: Path, disk: Path, after_s: float = 0.0) -> str:
    """The log directory's disk filled mid-run (all but 64 KiB taken): one
    line naming the file that could not be written, exit non-zero, and what
    is on the disk still loads."""
    log_dir = disk / "run"
    job = Job(controller, training_args(data_dir), log_dir, output_path=disk.parent / "run.out")
    job.wait_for_training(after_s)
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    filler.write_bytes(b"\0" * max(free - 64 * 1024, 0))
    ended_s = job.wait(END_BOUND_S)
    line = error_line(job.output, "No space left on device")
    assert job.process.returncode != 0
    assert str(log_dir) in line
    filler.unlink()
    assert_nothing_left(log_dir)
    assert_outputs_whole(log_dir)
    return f"disk full ({controller}): ended {ended_s:.1f} s after the disk filled: {line}"
