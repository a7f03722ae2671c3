"""benchmarks/run_matrix.sh on one machine with its default layouts,
hostfiles, data and output, in a fresh copy of the checkout (its tracked
files, the environment set up, MNIST in data/): the one-node layouts run on
this machine, each two-node layout gets one line saying how to run it, and
the tables say the same. One repeat of a few steps: how repeats are
combined and the workload's own figures are test_matrix.py's."""

import json
import os
import shutil
import subprocess

import pytest
from conftest import BIN, REPO


def fresh_checkout(dest):
    """What a clone of this checkout holds (its tracked files, as they are
    now), with the environment setup made (.venv)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    (dest / ".venv").symlink_to(BIN.parent)
    return dest


@pytest.mark.slow
def test_the_matrix_with_its_defaults_on_one_machine(mnist_dir, tmp_path):
    checkout = fresh_checkout(tmp_path / "checkout")
    shutil.copytree(mnist_dir, checkout / "data")
    result = subprocess.run(["benchmarks/run_matrix.sh", "--repeats", "1", "--warmup-steps", "2",
                             "--steps", "10"], cwd=checkout, capture_output=True,
                            text=True, timeout=600,
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    for layout in ("2x2", "2x4"):
        said = [line for line in lines if line.startswith(f"{layout}:")]
        assert said == [
            f"{layout}: not run: needs 2 nodes, and {layout} names a, b, unknown here: name your "
            f"nodes with --hosts, list them in {checkout}/hostfiles/{layout}, or emulate two "
            "hosts on this machine with --emulate"], lines

    (out,) = (checkout / "runs" / "benchmarks").iterdir()
    results = json.loads((out / "results.json").read_text())
    runs = {(r["layout"], r["launcher"], r["repeat"]): r for r in results["runs"]}
    for layout in ("1x1", "1x2"):
        for launcher in ("horovod", "ddp"):
            run = runs[(layout, launcher, 0)]
            assert run["status"] == "ok", run["reason"]
            assert run["hosts"] == ["localhost"]
    rows = {row["layout"]: row for row in results["rows"]}
    assert rows["2x2"]["status"] == "failed"
    assert rows["2x2"]["reason"].startswith("needs 2 nodes, and 2x2 names a, b, unknown here")
    assert "needs 2 nodes" in (out / "scaling.md").read_text()


@pytest.mark.slow
def test_a_users_benchmark_is_the_workload(tmp_path):
    """A user's script that prints Horovod's benchmark line, two ranks on
    this machine: its figure is the line's, its command the one horovodrun
    ran. (Its layouts and repeats are the trainer's: above.)"""
    out = tmp_path / "out"
    result = subprocess.run(
        ["benchmarks/run_matrix.sh", "--command",
         "python tests/user_scripts/pytorch_synthetic_benchmark.py --rounds 2",
         "--hosts", "localhost", "--layouts", "1x2", "--repeats", "1", "--out-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HVT_PYTHON": str(BIN / "python")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    (run,) = results["runs"]
    assert run["status"] == "ok", run["reason"]
    said = (out / "runs" / "1x2-horovod-0" / "output.log").read_text()
    total = float(said.rsplit("Total img/sec on 2 CPU(s): ", 1)[1].split()[0])
    assert run["images_per_sec"] == total > 0
    assert (out / "runs" / "1x2-horovod-0" / "command.txt").read_text().endswith(
        f"{BIN / 'python'} tests/user_scripts/pytorch_synthetic_benchmark.py --rounds 2\n")
    assert results["settings"]["user_command"] == (
        "python tests/user_scripts/pytorch_synthetic_benchmark.py --rounds 2")
    assert "| 1x2 | 2 |" in (out / "scaling.md").read_text()
