"""The checklist pages "Your GPU servers" and "Your own training script"
run as written on the emulated hosts a and b (tests/checklists.py): their
blocks marked `run: emulated`, in the page's order, in one shell on host a
from the checkout, the GPU layout as two cores carry it and the trainer or
the user's script on the test's digits. The pages' Slurm blocks run in
tests/cluster/test_slurm.py, on the local Slurm."""

import json
import subprocess

import pytest
from checklists import as_run_here, blocks
from conftest import BIN, REPO, on_host

TRAINER = "horovod_train/pytorch_mnist.py"


@pytest.mark.slow
@pytest.mark.cluster
def test_gpu_servers_page_runs_as_written_on_the_emulated_hosts(cluster, small_mnist_dir,
                                                                tmp_path):
    commands = [command for block in blocks()
                if block.page == "gpu-servers.md" and block.mark == "emulated"
                for command in block.commands]
    data = ["--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "1",
            "--no-progress", "--log-dir", str(tmp_path / "run")]
    script = "\n".join(["set -euo pipefail", f"cd {REPO}"] + [
        as_run_here([*command, *data] if TRAINER in command else command, {})
        for command in commands])
    assert "scripts/preflight.sh -H a:2,b:2" in script and "horovodrun -np 4 -H a:2,b:2" in script
    result = subprocess.run(on_host("a", ["bash", "-c", script]), capture_output=True,
                            text=True, timeout=400)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "weights identical on all ranks: yes" in output, output[-4000:]
    assert (tmp_path / "run" / "summary.json").is_file()


@pytest.mark.cluster
def test_your_script_page_runs_as_written_on_the_emulated_hosts(cluster, small_mnist_dir,
                                                                tmp_path):
    """A user's script called pytorch_mnist.py, with options of its own
    (--out): not the project's trainer (it carries no mark), so neither
    horovodrun nor launch.sh asks it --check-options, and its options reach
    it on one host and across a:2,b:2."""
    commands = [command for block in blocks()
                if block.page == "your-script.md" and block.mark == "emulated"
                for command in block.commands]
    assert [command[0] for command in commands] == ["horovodrun", "scripts/launch.sh"]
    outs = [tmp_path / "one-host.json", tmp_path / "two-hosts.json"]
    script_args = ["--data-dir", str(small_mnist_dir)]
    script = "\n".join(["set -euo pipefail", f"cd {REPO}", f"export PATH={BIN}:$PATH"] + [
        as_run_here([*command, *script_args, "--out", str(out)], {})
        for command, out in zip(commands, outs, strict=True)])
    result = subprocess.run(on_host("a", ["bash", "-c", script]), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "launch: network " in result.stdout, result.stdout[-3000:]
    for out, hosts in zip(outs, [{"a": 2}, {"a": 2, "b": 2}], strict=True):
        ran = json.loads(out.read_text())
        assert ran["size"] == sum(hosts.values()) and ran["hosts"] == hosts, ran
        assert ran["same_weights"] is True
        assert ran["argv"] == ["--epochs", "1", *script_args, "--out", str(out)]
