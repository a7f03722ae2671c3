"""scripts/launch.sh across the emulated hosts, from host a: an Open MPI
hostfile's conventions, a user's TensorFlow script as it is, and b's SSH
port closed or blocked by its firewall, named before any rank starts (the
launcher's every other case runs on loopback: tests/parallel/test_launch.py)."""

import json
import os
import subprocess
import time

import pytest
from conftest import BIN, EMULATE, REPO, marker_command, require_framework
from entry_faults import SSH_REFUSED_ON_B

LAUNCH = REPO / "scripts" / "launch.sh"
ENV = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}


@pytest.mark.cluster
def test_an_openmpi_hostfile_launches_across_two_hosts(cluster, tmp_path):
    """From emulated host a, a hostfile with comments, a blank line and a
    host alone: 2 ranks on a, 1 on b, each writing where it ran."""
    (tmp_path / "hostfile").write_text("# two hosts\n\na slots=2  # this one\nb\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    code = ("import os, pathlib, socket; pathlib.Path(os.environ['MARKERS'], "
            "str(os.getpid())).write_text(socket.gethostname())")
    result = subprocess.run(
        [str(EMULATE), "exec", "a", "--", str(LAUNCH), "-np", "3", "-hostfile",
         str(tmp_path / "hostfile"), "--gloo",
         "env", f"MARKERS={markers}", str(BIN / "python"), "-c", code],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(path.read_text() for path in markers.iterdir()) == ["a", "a", "b"]


@pytest.mark.cluster
def test_a_users_tensorflow_script_runs_across_both_hosts(cluster, small_mnist_dir, tmp_path):
    """From a across a:1,b:1, a user's TensorFlow custom loop as it is, with
    hvd.DistributedGradientTape (tests/user_scripts/). The paths run a
    script whatever its framework: the PyTorch one runs by docs/your-script.md's
    commands (test_checklist_runs.py), the Keras fit one in the Slurm job
    and the image (test_slurm.py, test_image_cluster.py); a TensorFlow run
    costs half a minute here."""
    require_framework("TensorFlow")
    out = tmp_path / "run.json"
    script_args = ["--data-dir", str(small_mnist_dir), "--epochs", "1", "--out", str(out)]
    result = subprocess.run(
        [str(EMULATE), "exec", "a", "--", str(LAUNCH), "-np", "2", "-H", "a:1,b:1",
         str(BIN / "python"), str(REPO / "tests" / "user_scripts" / "tensorflow2_mnist.py"),
         *script_args],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ran = json.loads(out.read_text())
    assert ran["size"] == 2 and ran["hosts"] == {"a": 1, "b": 1}, ran
    assert ran["same_weights"] is True and ran["argv"] == script_args
    assert 0 < ran["losses"][-1] < 2.3, ran  # learnt: a guess is ln 10 = 2.30


@pytest.mark.cluster
@pytest.mark.parametrize("rule, said", [
    (["-j", "REJECT", "--reject-with", "tcp-reset"], "connection refused"),
    (["-j", "DROP"], "no answer within 5 s"),
], ids=["port closed", "port blocked"])
def test_ssh_port_closed_on_b_only_is_one_line_before_any_rank(cluster, tmp_path, rule, said):
    """A firewall rule inside host b refuses or drops its SSH port, a stays
    reachable: from a, the launcher names b within 30 s and starts nothing."""
    markers = tmp_path / "markers"
    markers.mkdir()
    iptables_in_b = ["ip", "netns", "exec", "hvt-b", "iptables"]
    ssh_rule = ["INPUT", "-p", "tcp", "--dport", str(cluster["port"]), *rule]
    subprocess.run([*iptables_in_b, "-A", *ssh_rule], check=True, timeout=30)
    try:
        started = time.monotonic()
        result = subprocess.run(
            [str(EMULATE), "exec", "a", "--", str(LAUNCH), "-np", "4", "-H", "a:2,b:2",
             *marker_command(markers)],
            cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - started
    finally:
        subprocess.run([*iptables_in_b, "-D", *ssh_rule], check=True, timeout=30)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    words = SSH_REFUSED_ON_B.format(port=cluster["port"]).replace("connection refused", said)
    assert len(lines) == 1 and lines[0].startswith(f"launch: error: {words}"), result.stderr
    assert elapsed < 30 and list(markers.iterdir()) == []
