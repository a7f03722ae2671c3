"""benchmarks/gpu_check.sh end to end on a machine without a GPU: the
build and the MNIST comparison run (our trainer and the loop that behaves
like Horovod's example, under horovodrun), the GPU parts are named as
skipped, every part's JSON and the table are written; a part that runs
past its time fails in its row, in bounded time, and the others still run."""

import json
import subprocess
import time

import pytest
from conftest import REPO

SCRIPT = REPO / "benchmarks/gpu_check.sh"


def gpu_check(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], cwd="/", capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_cpu_parts_run_and_gpu_parts_are_named_as_skipped(small_mnist_dir, tmp_path):
    out = tmp_path / "check"
    result = gpu_check("--data-dir", str(small_mnist_dir), "--epochs", "1",
                       "--out-dir", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "gpu_check.json").read_text())
    assert record["gpus"] == 0 and record["skipped"] == ["allreduce", "resnet50", "timeline"]
    assert {name: part["status"] for name, part in record["parts"].items()} == {
        "build": "ok", "allreduce": "skipped", "mnist": "ok", "resnet50": "skipped",
        "timeline": "skipped"}
    assert record["machine"]["cpu_model"] and record["machine"]["commit"]
    assert record["command"] == ("benchmarks/gpu_check.sh --data-dir DATA_DIR --epochs 1 "
                                 "--out-dir OUT")

    build = json.loads((out / "build.json").read_text())
    assert "PyTorch" in build["frameworks"] and "Gloo" in build["controllers"]

    mnist = json.loads((out / "mnist.json").read_text())
    assert (mnist["ranks"], mnist["device"], mnist["train_samples"]) == (2, "cpu", 1600)
    assert set(mnist["sides"]) == {"ours", "reference"}
    for side in mnist["sides"].values():
        assert 0.1 < side["test_accuracy"] <= 1 and side["wall_s"] > 0
        assert side["command"].startswith("horovodrun -np 2 -H localhost:2 python ")
        assert str(tmp_path) not in side["command"]  # as typed: OUT, DATA_DIR
    reference = json.loads((out / "mnist" / "reference.json").read_text())
    assert reference["ranks"] == 2 and reference["lr"] == 0.01  # the example's defaults
    for part in (build, mnist, reference):  # each JSON names the machine itself
        assert part["machine"]["cpu_model"] and part["machine"]["commit"]

    # The table is the last thing printed, one row per part, and kept.
    table = (out / "gpu_check.md").read_text()
    assert result.stdout.endswith(table)
    assert "| allreduce | skipped | no GPU |" in table and "| mnist | ok | 2 ranks" in table


def test_a_part_past_its_time_fails_in_its_row_and_the_run_says_so(tmp_path):
    started = time.monotonic()
    result = gpu_check("--parts", "build,timeline", "--timeout", "0.5",
                       "--out-dir", str(tmp_path), timeout=120)
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert record["parts"]["build"]["status"] == "failed"
    assert "ran past 0 s" not in record["parts"]["build"]["summary"]
    assert "ran past" in record["parts"]["build"]["summary"]
    assert record["parts"]["timeline"]["status"] == "skipped"
    assert result.stderr.strip().splitlines()[-1] == (
        "gpu_check: failed: build (each one's reason is in its row)")


@pytest.mark.parametrize("args, message", [
    (["--parts", "build,resnet"], "argument --parts: resnet: choose from build"),
    (["--example", "/nonexistent/pytorch_mnist.py"], "--example /nonexistent/"),
    (["--parts", "build", "--example", str(REPO / "README.md")], "--example runs in the mnist"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = gpu_check(*args, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("gpu_check: error:")
