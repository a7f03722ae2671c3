"""Benchmark mode: `pytorch_mnist.py --benchmark-steps` (Horovod) and
benchmarks/ddp_benchmark.py (torchrun + DDP) time the same steps and write
benchmark.json in one format: every rank's figures, totals that are their
sums, Horovod's allreduce wait, DDP's left as not measured."""


import json
import os
import subprocess

import pytest
from conftest import BIN, REPO, horovodrun

from horovod_train.torch import timed_steps


def read_result(log_dir) -> dict:
    return json.loads((log_dir / timed_steps.RESULT_NAME).read_text())


def assert_consistent(record: dict, ranks: int, steps: int, batch: int) -> None:
    assert record["ranks"] == ranks
    assert [r["rank"] for r in record["per_rank"]] == list(range(ranks))
    assert record["images_per_sec"] == pytest.approx(
        sum(r["images_per_sec"] for r in record["per_rank"]))
    for figures in record["per_rank"]:
        # images/s and step time are two views of one measurement
        assert figures["images_per_sec"] == pytest.approx(batch / figures["step_time_s"])
    assert record["steps"] == steps and record["batch_per_rank"] == batch


@pytest.mark.slow
def test_horovod_benchmark_mode_times_steps_on_every_rank(mnist_dir, tmp_path):
    run = horovodrun(["-np", "2", "-H", "localhost:2", "--gloo"],
                     ["--data-dir", str(mnist_dir), "--no-download", "--benchmark-steps", "6",
                      "--warmup-steps", "2", "--batch-size", "32"], tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    record = read_result(tmp_path)
    assert_consistent(record, ranks=2, steps=6, batch=32)
    assert record["launcher"] == "horovod" and record["controller"] == "gloo"
    assert record["workload"] == "mnist" and record["model"] == "mnist_cnn"
    # The DataLoader, as ddp_benchmark.py reads MNIST, so the two compare.
    assert record["data_pipeline"] == "loader"
    assert record["gradient_bytes"] == 4 * record["parameters"]
    assert all(0 <= r["allreduce_time_s"] < r["step_time_s"] for r in record["per_rank"])
    assert record["amp"] == "off"  # --amp auto, on the CPU
    assert not (tmp_path / "checkpoints").exists()  # no training outputs in this mode
    assert "benchmark horovod mnist_cnn (mnist)" in run.output


@pytest.mark.slow
def test_ddp_baseline_writes_the_same_record(mnist_dir, tmp_path):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(
        [str(BIN / "python"), "-m", "torch.distributed.run", "--nnodes", "1",
         "--nproc-per-node", "2", "--master-port", "29391", "benchmarks/ddp_benchmark.py",
         "--data-dir", str(mnist_dir), "--no-download", "--benchmark-steps", "6",
         "--warmup-steps", "2", "--batch-size", "32", "--amp", "bf16",
         "--log-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = read_result(tmp_path)
    assert_consistent(record, ranks=2, steps=6, batch=32)
    assert record["launcher"] == "ddp" and record["controller"] == "gloo"
    assert record["amp"] == "bf16"  # the trainer's --amp: bf16 runs on the CPU too
    assert record["allreduce_time_s"] is None
    assert all(r["allreduce_time_s"] is None for r in record["per_rank"])


@pytest.mark.slow
def test_synthetic_resnet_runs_without_data(tmp_path):
    run = horovodrun(["-np", "1", "-H", "localhost:1", "--gloo"],
                     ["--model", "resnet18", "--synthetic", "--image-size", "32", "--amp", "bf16",
                      "--benchmark-steps", "2", "--warmup-steps", "1", "--batch-size", "4",
                      "--data-dir", str(tmp_path / "nothing-here")], tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    record = read_result(tmp_path)
    assert record["workload"] == "synthetic" and record["model"] == "resnet18"
    assert record["parameters"] > 11_000_000 and record["amp"] == "bf16"


def test_ddp_benchmark_outside_torchrun_says_so():
    result = subprocess.run([str(BIN / "python"), "benchmarks/ddp_benchmark.py",
                             "--benchmark-steps", "3"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("ddp_benchmark.py: error: run me under torchrun "
                                     "(it sets RANK, WORLD_SIZE and MASTER_ADDR)")
