"""The checklist page "Your GPU servers" run as written on the emulated
hosts a and b (tests/checklists.py): its blocks marked `run: emulated`, in
the page's order, in one shell on host a from the checkout, the GPU layout
as two cores carry it and the trainer on the test's digits. The page's
Slurm twin runs in tests/cluster/test_slurm.py, on the local Slurm."""

import subprocess

import pytest
from checklists import as_run_here, blocks
from conftest import REPO, on_host

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
