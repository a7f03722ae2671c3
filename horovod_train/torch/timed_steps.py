"""Throughput measurement: a fixed number of warm-up and measured training
steps, on real MNIST batches or synthetic images, with Horovod or with
PyTorch DDP. The same loop times both, so their figures compare.

Each rank records its images/s, its mean step time and, with Horovod, the
time per step it waited for the gradient allreduce to finish after the
backward pass (the communication left exposed, not hidden behind compute);
rank 0 writes them all to benchmark.json."""

import itertools
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from horovod_train.core.atomic import atomic_write_json
from horovod_train.torch.precision import autocast, step_reduced

RESULT_NAME = "benchmark.json"


def synthetic_batches(batch_size: int, input_shape: tuple[int, ...], classes: int,
                      device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One random batch, made once on the device and served forever: the
    steps then measure the model and the allreduce, not the input pipeline
    (as Horovod's and NVIDIA's synthetic benchmarks do)."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, *input_shape, generator=generator).to(device)
    labels = torch.randint(0, classes, (batch_size,), generator=generator).to(device)
    return itertools.repeat((images, labels))


def loader_batches(loader, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The training loader's batches, epoch after epoch."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        for images, labels in loader:
            yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        epoch += 1


def every_epoch(batches) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The batches of epochs 0, 1, 2, ... one after the other, from either
    pipeline of the trainer (anything with .epoch(e))."""
    return itertools.chain.from_iterable(batches.epoch(e) for e in itertools.count())


def horovod_step(model: nn.Module, optimizer, batches: Iterator,
                 amp_dtype: torch.dtype | None, scaler) -> Callable[[], float]:
    """One step with Horovod's DistributedOptimizer, in the trainer's
    precision (precision.amp_settings; `scaler` a GradScaler, enabled for
    fp16); returns the seconds spent in synchronize(), i.e. waiting for
    allreduces that the backward pass started and that had not finished
    when it ended."""

    def step() -> float:
        images, labels = next(batches)
        optimizer.zero_grad()
        with autocast(images.device, amp_dtype):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        tic = time.perf_counter()
        optimizer.synchronize()
        waited = time.perf_counter() - tic
        step_reduced(optimizer, scaler)
        return waited

    return step


def ddp_step(model: nn.Module, optimizer, batches: Iterator,
             amp_dtype: torch.dtype | None, scaler) -> Callable[[], None]:
    """One step of a DistributedDataParallel model, in the same precision:
    DDP reduces its gradient buckets inside backward(), so there is no
    separate wait to time."""

    def step() -> None:
        images, labels = next(batches)
        optimizer.zero_grad()
        with autocast(images.device, amp_dtype):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def time_steps(step: Callable[[], float | None], warmup: int, steps: int, batch_size: int,
               device: torch.device) -> dict:
    """Warm-up steps (untimed), then `steps` timed ones; this rank's figures."""
    for _ in range(warmup):
        step()
    wait_for_device(device)
    waited, tic = 0.0, time.perf_counter()
    for _ in range(steps):
        waited += step() or 0.0
    wait_for_device(device)
    elapsed = time.perf_counter() - tic
    return {
        "host": socket.gethostname(),
        "images_per_sec": steps * batch_size / elapsed,
        "step_time_s": elapsed / steps,
        "allreduce_time_s": waited / steps,
    }


def wait_for_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gradient_bytes(model: nn.Module, compressed: bool) -> int:
    """Bytes each rank contributes to one step's allreduce."""
    return sum(p.numel() * (2 if compressed else p.element_size())
               for p in model.parameters() if p.requires_grad)


def summarize(per_rank: list[dict], settings: dict, measures_allreduce: bool) -> dict:
    """The run's record: every rank's figures, and totals (images/s summed
    over ranks; step and allreduce times averaged)."""
    ranks = [{"rank": rank, **figures} for rank, figures in enumerate(per_rank)]
    if not measures_allreduce:
        for figures in ranks:
            figures["allreduce_time_s"] = None
    n = len(ranks)
    return {
        **settings,
        "ranks": n,
        "per_rank": ranks,
        "images_per_sec": sum(r["images_per_sec"] for r in ranks),
        "step_time_s": sum(r["step_time_s"] for r in ranks) / n,
        "allreduce_time_s": (sum(r["allreduce_time_s"] for r in ranks) / n
                             if measures_allreduce else None),
    }


def write_result(log_dir: Path, record: dict) -> Path:
    path = Path(log_dir) / RESULT_NAME
    atomic_write_json(path, record)
    return path


def format_result(record: dict) -> str:
    per_rank = ", ".join(f"{r['images_per_sec']:.1f}" for r in record["per_rank"])
    waited = record["allreduce_time_s"]
    return (f"benchmark {record['launcher']} {record['model']} ({record['workload']}): "
            f"{record['images_per_sec']:.1f} images/s over {record['ranks']} ranks "
            f"({per_rank}); step {record['step_time_s'] * 1e3:.1f} ms"
            + (f", allreduce wait {waited * 1e3:.1f} ms" if waited is not None else "")
            + (f"; leaves out {record['leaves_out']}" if record.get("leaves_out") else ""))
