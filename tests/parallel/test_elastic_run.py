"""An elastic run on this machine (horovodrun --min-np/--max-np, the host
discovery script listing localhost): --resume goes on from the per-epoch
checkpoint, as a run of whole epochs does, and a resume at a rate that
diverges ends the job. Hosts lost and regained: tests/cluster/test_elastic.py."""

import json
import os
import subprocess

import diverged
import pytest
from conftest import BIN, REPO, TRAINER

pytestmark = pytest.mark.slow


def elastic_run(hosts_file, data_dir, log_dir, *trainer_args: str) -> subprocess.CompletedProcess:
    # Horovod finds the interface hosts share with two hosts at least; on
    # one, it waits for a second (until --elastic-timeout) unless told.
    command = [str(BIN / "horovodrun"), "-np", "2", "--min-np", "2", "--max-np", "2",
               "--network-interface", "lo",
               "--host-discovery-script", str(REPO / "scripts" / "discover_hosts.sh"),
               str(BIN / "python"), TRAINER, "--elastic", "--data-dir", str(data_dir),
               "--no-download", "--no-progress", "--log-dir", str(log_dir), *trainer_args]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
           "HVT_ELASTIC_HOSTS_FILE": str(hosts_file)}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_elastic_resume_goes_on_from_the_checkpoint(small_mnist_dir, tmp_path):
    hosts_file, log_dir = tmp_path / "hosts", tmp_path / "run"
    hosts_file.write_text("localhost slots=2\n")
    first = elastic_run(hosts_file, small_mnist_dir, log_dir, "--epochs", "1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    first_events = len((log_dir / "elastic.jsonl").read_text().splitlines())

    # bf16, as every kind of run takes --amp (on the CPU too).
    resumed = elastic_run(hosts_file, small_mnist_dir, log_dir, "--epochs", "2", "--resume",
                          "--amp", "bf16")
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-3000:]
    assert "resuming after epoch 1" in output, output[-3000:]
    summary = json.loads((log_dir / "summary.json").read_text())
    assert summary["resumed_after_epoch"] == 1 and summary["epochs"] == 2
    assert summary["weights_identical"] is True and summary["amp"] == "bf16"
    assert ", amp bf16, resuming after epoch 1" in output
    epochs = [json.loads(line)["epoch"]
              for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]
    # The resumed run's first commit is the checkpoint's: epoch 1 done, none of 2.
    lines = (log_dir / "elastic.jsonl").read_text().splitlines()[first_events:]
    commits = [json.loads(line) for line in lines if '"commit"' in line]
    assert (commits[0]["epoch"], commits[0]["samples_done"]) == (1, 0), commits[:3]
    assert all(c["epoch"] >= 1 for c in commits)

    # Resumed at a rate that diverges: the job ends (exit 1, rank 0's line,
    # the checkpoint as it was), not a failure Horovod Elastic recovers from.
    earlier = diverged.earlier_outputs(log_dir)
    events = len((log_dir / "elastic.jsonl").read_text().splitlines())
    diverging = elastic_run(hosts_file, small_mnist_dir, log_dir, "--epochs", "3",
                            *diverged.DIVERGING)
    diverged.assert_stopped(diverging.returncode, diverging.stdout + diverging.stderr,
                            "pytorch_mnist.py", "3/3", earlier)
    after = [json.loads(line)["event"]
             for line in (log_dir / "elastic.jsonl").read_text().splitlines()[events:]]
    assert after == ["commit"], after  # the checkpoint's commit; no reset, no later commit
