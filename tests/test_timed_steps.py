"""Benchmark mode: `pytorch_mnist.py --benchmark-steps` (Horovod) and
benchmarks/ddp_benchmark.py (torchrun + DDP) time the same steps and write
benchmark.json in one format: every rank's figures, totals that are their
sums, Horovod's allreduce wait, DDP's left as not measured."""

import itertools
import json
import os
import subprocess

import numpy as np
import pytest
import torch
from conftest import BIN, REPO, horovodrun

from horovod_train.bench import timed_steps
from horovod_train.core import mnist
from horovod_train.pytorch_mnist import parse_args
from horovod_train.torch import device_data


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
    assert not (tmp_path / "checkpoints").exists()  # no training outputs in this mode
    assert "benchmark horovod mnist_cnn (mnist)" in run.output


@pytest.mark.slow
def test_ddp_baseline_writes_the_same_record(mnist_dir, tmp_path):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(
        [str(BIN / "python"), "-m", "torch.distributed.run", "--nnodes", "1",
         "--nproc-per-node", "2", "--master-port", "29391", "benchmarks/ddp_benchmark.py",
         "--data-dir", str(mnist_dir), "--no-download", "--benchmark-steps", "6",
         "--warmup-steps", "2", "--batch-size", "32", "--log-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = read_result(tmp_path)
    assert_consistent(record, ranks=2, steps=6, batch=32)
    assert record["launcher"] == "ddp" and record["controller"] == "gloo"
    assert record["allreduce_time_s"] is None
    assert all(r["allreduce_time_s"] is None for r in record["per_rank"])


@pytest.mark.slow
def test_synthetic_resnet_runs_without_data(tmp_path):
    run = horovodrun(["-np", "1", "-H", "localhost:1", "--gloo"],
                     ["--model", "resnet18", "--synthetic", "--image-size", "32",
                      "--benchmark-steps", "2", "--warmup-steps", "1", "--batch-size", "4",
                      "--data-dir", str(tmp_path / "nothing-here")], tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    record = read_result(tmp_path)
    assert record["workload"] == "synthetic" and record["model"] == "resnet18"
    assert record["parameters"] > 11_000_000


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet50", "--benchmark-steps", "3"], "add --synthetic"),
    (["--synthetic"], "--benchmark-steps runs only"),
    (["--benchmark-steps", "0"], "must be >= 1"),
])
def test_benchmark_options_that_cannot_work_are_refused(argv, message):
    result = subprocess.run([str(BIN / "python"), "horovod_train/pytorch_mnist.py", *argv],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_ddp_benchmark_outside_torchrun_says_so():
    result = subprocess.run([str(BIN / "python"), "benchmarks/ddp_benchmark.py",
                             "--benchmark-steps", "3"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("ddp_benchmark.py: error: run me under torchrun "
                                     "(it sets RANK, WORLD_SIZE and MASTER_ADDR)")


def test_benchmark_mode_reads_through_the_loader_unless_told():
    """Training defaults to the in-memory pipeline; timed-step runs to the
    DataLoader, the input of ddp_benchmark.py, so Horovod and DDP compare."""
    assert parse_args([]).torch.data_pipeline == "memory"
    assert parse_args(["--benchmark-steps", "3"]).torch.data_pipeline == "loader"
    assert parse_args(["--benchmark-steps", "3", "--data-pipeline", "memory"]).torch \
        .data_pipeline == "memory"


def test_every_epoch_runs_the_epochs_one_after_the_other():
    images = np.zeros((10, 28, 28), dtype=np.uint8)
    data = device_data.DeviceMnist(mnist.Split(images, np.arange(10, dtype=np.uint8)),
                                   torch.device("cpu"))
    shards = device_data.ShardedBatches(data, 4, 0, 1, seed=0)
    labels = [b[1].tolist() for b in itertools.islice(timed_steps.every_epoch(shards), 6)]
    expected = [b[1].tolist() for e in (0, 1) for b in shards.epoch(e)]
    assert labels == expected and len(labels) == 6  # 4 + 4 + 2 per epoch


def test_totals_are_sums_and_means_of_the_ranks():
    per_rank = [{"host": "a", "images_per_sec": 100.0, "step_time_s": 0.64,
                 "allreduce_time_s": 0.1},
                {"host": "b", "images_per_sec": 80.0, "step_time_s": 0.8,
                 "allreduce_time_s": 0.3}]
    record = timed_steps.summarize(per_rank, {"launcher": "horovod"}, measures_allreduce=True)
    assert record["images_per_sec"] == 180.0
    assert record["step_time_s"] == pytest.approx(0.72)
    assert record["allreduce_time_s"] == pytest.approx(0.2)
    assert [r["rank"] for r in record["per_rank"]] == [0, 1]
