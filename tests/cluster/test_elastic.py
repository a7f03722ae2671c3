"""Elastic training across the emulated hosts: 4 ranks on a:2,b:2; host b is
lost mid-training, twice: dropped from the hosts file and its ranks killed
with SIGKILL, then cut off (its link down, nothing killed). Each time
training goes on on a from the last commit and loses nothing committed, b
comes back (listed again, its link up) and its ranks rejoin; the run ends
above 95%."""

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, REPO, TRAINER, host_processes, on_host

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

# How long the ranks on a may wait for b: Gloo's timeout for killed ranks
# (30 s by default, shortened here as in test_stalls.py); for a host cut
# off, the driver learns of it when ssh gives up on b (45-60 s, the hosts'
# ServerAliveInterval), then the rest rendezvous.
GLOO_TIMEOUT_S = 10
DETECT_BOUND_S = {"killed": GLOO_TIMEOUT_S + 30, "cut off": 120}


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
            output = job.stdout.read()
            # What ended it (a rank's abort, say) can be far above the
            # launcher's traceback at the end.
            telling = [line for line in output.splitlines()
                       if re.search(r"terminate called|what\(\)|Abort|exit with status", line)]
            pytest.fail(f"the job ended (exit {job.returncode}) before {what}:\n"
                        + "\n".join(telling[:20]) + "\n...\n" + output[-3000:])
        time.sleep(0.5)
    pytest.fail(f"no {what} within {timeout} s")


def kill_ranks_on(host: str) -> int:
    """SIGKILL the trainer processes running inside an emulated host."""
    killed = 0
    for pid, cmdline in host_processes(host).items():
        if "pytorch_mnist.py" in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def lose_b(how: str, hosts_file: Path) -> None:
    if how == "killed":
        hosts_file.write_text("a slots=2\n")
        assert kill_ranks_on("b") == 2
    else:
        subprocess.run(["ip", "-n", "hvt-b", "link", "set", "eth0", "down"], check=True)


def bring_b_back(how: str, hosts_file: Path) -> None:
    if how == "killed":
        hosts_file.write_text("a slots=2\nb slots=2\n")
    else:
        subprocess.run(["ip", "-n", "hvt-b", "link", "set", "eth0", "up"], check=True)


def lose_and_regain_b(how: str, job: subprocess.Popen, log_dir: Path, hosts_file: Path) -> str:
    """Once 4 ranks commit inside an epoch after everything so far: lose b,
    check the reset to 2 ranks and that it went back to the last commit,
    bring b back and wait for its ranks to rejoin."""
    start = len(events(log_dir))
    after_epoch = max([e["epoch"] for e in events(log_dir)], default=0)
    wait_for(lambda: any(e["event"] == "commit" and e["epoch"] > after_epoch
                         and e["samples_done"] and e["size"] == 4
                         for e in events(log_dir)[start:]),
             f"a commit in epoch {after_epoch + 2} or later", job, 300)
    before = len(events(log_dir))
    lost_at = time.time()
    lose_b(how, hosts_file)
    wait_for(lambda: any(e["event"] == "reset" and e["size"] == 2
                         for e in events(log_dir)[before:]),
             f"reset to 2 ranks (b {how})", job, DETECT_BOUND_S[how] + 60)
    log = events(log_dir)
    reset = next(e for e in log[before:] if e["event"] == "reset")
    last_commit = [e for e in log[:log.index(reset)] if e["event"] == "commit"][-1]
    assert reset["time"] - lost_at < DETECT_BOUND_S[how], how
    # Back to the last commit, not earlier: nothing committed was lost.
    assert (reset["epoch"], reset["samples_done"]) == (last_commit["epoch"],
                                                      last_commit["samples_done"])

    back_at, grown_from = time.time(), len(events(log_dir))
    bring_b_back(how, hosts_file)
    wait_for(lambda: any(e["size"] == 4 for e in events(log_dir)[grown_from:]),
             f"b's ranks rejoining (b {how})", job, 180)
    rejoined = next(e for e in events(log_dir)[grown_from:] if e["size"] == 4)
    return (f"host b {how}: reset after {reset['time'] - lost_at:.1f} s, back at the commit of "
            f"epoch {reset['epoch']} sample {reset['samples_done']}; b back: 4 ranks after "
            f"{rejoined['time'] - back_at:.1f} s")


def test_losing_host_b_keeps_training_on_a_and_b_rejoins(cluster, mnist_dir, tmp_path):
    """b lost twice in one run: first killed, then cut off."""
    hosts_file, log_dir = tmp_path / "hosts", tmp_path / "run"
    hosts_file.write_text("a slots=2\nb slots=2\n")
    command = [str(BIN / "horovodrun"), "-np", "4", "--min-np", "2", "--max-np", "4",
               "--host-discovery-script", str(REPO / "scripts" / "discover_hosts.sh"),
               "--blacklist-cooldown-range", "1", "3",
               str(BIN / "python"), TRAINER, "--elastic", "--commit-every", "5",
               "--epochs", "6", "--data-dir", str(mnist_dir), "--no-download",
               "--no-progress", "--log-dir", str(log_dir)]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
           "HVT_ELASTIC_HOSTS_FILE": str(hosts_file), "HVT_PYTHON": str(BIN / "python")}
    job = subprocess.Popen(on_host("a", ["env", f"HVT_ELASTIC_HOSTS_FILE={hosts_file}",
                                         f"HOROVOD_GLOO_TIMEOUT_SECONDS={GLOO_TIMEOUT_S}",
                                         f"HVT_PYTHON={BIN / 'python'}", *command]),
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    said = []
    try:
        for how in ("killed", "cut off"):
            said.append(lose_and_regain_b(how, job, log_dir, hosts_file))
        output, _ = job.communicate(timeout=600)
    finally:
        for how in ("killed", "cut off"):
            bring_b_back(how, hosts_file)
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
    assert epochs == list(range(1, 7))
    assert summary["epochs"] == 6 and summary["options"]["elastic"] is True
    assert 0 < summary["train_time_s"] < summary["wall_time_s"]
    print("; ".join(said) + f"; test accuracy {summary['test_accuracy']:.4f}")
