"""Elastic training across the emulated hosts: 4 ranks on a:2,b:2; host b is
taken away mid-training (dropped from the hosts file, its ranks killed with
SIGKILL), training goes on on a from the last commit and loses nothing
committed; b is put back and its ranks rejoin; the run ends above 95%."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, REPO, TRAINER, on_host

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DETECT_BOUND_S = 60  # Gloo's timeout (30 s) bounds how long a rank waits for a lost peer


def events(log_dir: Path) -> list[dict]:
    path = log_dir / "elastic.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for(predicate, what: str, job: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if job.poll() is not None:
            pytest.fail(f"the job ended (exit {job.returncode}) before {what}:\n"
                        + job.stdout.read()[-3000:])
        time.sleep(0.5)
    pytest.fail(f"no {what} within {timeout} s")


def kill_ranks_on(namespace: str) -> int:
    """SIGKILL the trainer processes running inside an emulated host."""
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True,
                          check=True).stdout.split()
    killed = 0
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().find(b"pytorch_mnist.py") >= 0:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
        except (FileNotFoundError, ProcessLookupError):
            pass
    return killed


def test_losing_host_b_keeps_training_on_a_and_b_rejoins(cluster, mnist_dir, tmp_path):
    hosts_file, log_dir = tmp_path / "hosts", tmp_path / "run"
    hosts_file.write_text("a slots=2\nb slots=2\n")
    command = [str(BIN / "horovodrun"), "-np", "4", "--min-np", "2", "--max-np", "4",
               "--host-discovery-script", str(REPO / "scripts" / "discover_hosts.sh"),
               "--blacklist-cooldown-range", "1", "3", "-p", "12345",
               str(BIN / "python"), TRAINER, "--elastic", "--commit-every", "5",
               "--epochs", "14", "--data-dir", str(mnist_dir), "--no-download",
               "--no-progress", "--log-dir", str(log_dir)]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
           "ELASTIC_HOSTS_FILE": str(hosts_file), "PYTHON": str(BIN / "python")}
    job = subprocess.Popen(on_host("a", ["env", f"ELASTIC_HOSTS_FILE={hosts_file}",
                                         f"PYTHON={BIN / 'python'}", *command]),
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        wait_for(lambda: any(e["event"] == "commit" and e["epoch"] >= 1 and e["samples_done"]
                             for e in events(log_dir)), "commit in the second epoch", job, 300)
        hosts_file.write_text("a slots=2\n")
        killed_at = time.time()
        assert kill_ranks_on("hvt-b") == 2
        before = len(events(log_dir))

        def shrunk():
            return any(e["event"] == "reset" and e["size"] == 2 for e in events(log_dir)[before:])
        wait_for(shrunk, "reset to 2 ranks", job, 120)
        log = events(log_dir)
        reset = next(e for e in log[before:] if e["event"] == "reset")
        last_commit = [e for e in log[:log.index(reset)] if e["event"] == "commit"][-1]
        assert reset["time"] - killed_at < DETECT_BOUND_S
        # Back to the last commit, not earlier: nothing committed was lost.
        assert (reset["epoch"], reset["samples_done"]) == (last_commit["epoch"],
                                                          last_commit["samples_done"])

        hosts_file.write_text("a slots=2\nb slots=2\n")
        back_at, grown_from = time.time(), len(events(log_dir))
        wait_for(lambda: any(e["size"] == 4 for e in events(log_dir)[grown_from:]),
                 "b's ranks rejoining", job, 180)
        rejoined = next(e for e in events(log_dir)[grown_from:] if e["size"] == 4)
        output, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, output[-3000:]

    log = events(log_dir)
    # Progress never goes back beyond a commit: every position is at or after
    # the last commit before it.
    committed = (0, 0)
    for e in log:
        position = (e["epoch"], e["samples_done"])
        assert position >= committed, e
        if e["event"] == "commit":
            committed = position
    summary = json.loads((log_dir / "summary.json").read_text())
    assert summary["size"] == 4 and summary["weights_identical"]
    assert summary["test_accuracy"] >= 0.95
    assert {e["size"] for e in log} == {2, 4}
    # The same outputs as any run: every epoch logged once, whatever the resets.
    epochs = [json.loads(line)["epoch"] for line in
              (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, 15))
    assert summary["epochs"] == 14 and summary["options"]["elastic"] is True
    assert 0 < summary["train_time_s"] < summary["wall_time_s"]
    print(f"host b lost: reset after {reset['time'] - killed_at:.1f} s, back at the commit "
          f"of epoch {reset['epoch']} sample {reset['samples_done']}; b back: 4 ranks after "
          f"{rejoined['time'] - back_at:.1f} s; test accuracy {summary['test_accuracy']:.4f}")
