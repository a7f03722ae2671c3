"""Benchmark mode: `pytorch_mnist.py --benchmark-steps` (Horovod) and
benchmarks/ddp_benchmark.py (torchrun + DDP) time the same steps and write
benchmark.json in one format: every rank's figures, totals that are their
sums, Horovod's allreduce wait, DDP's left as not measured."""

import itertools

import numpy as np
import pytest
import torch

from horovod_train.core import mnist
from horovod_train.torch import device_data, timed_steps
from horovod_train.torch.options import parse_args


def test_benchmark_mode_reads_through_the_loader_unless_told():
    """Training defaults to the in-memory pipeline; timed-step runs to the
    DataLoader, the input of ddp_benchmark.py, so Horovod and DDP compare."""
    assert parse_args([]).framework.torch.data_pipeline == "memory"
    assert parse_args(["--benchmark-steps", "3"]).framework.torch.data_pipeline == "loader"
    assert parse_args(["--benchmark-steps", "3", "--data-pipeline", "memory"]).framework.torch \
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
