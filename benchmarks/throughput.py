"""Our trainer's images/second against the upstream-style reference
(upstream_example.py), in one process, on the same device, network, batch
size and data. The two are measured in turns (ours, reference, ours,
reference, ...) so that whatever else the machine is doing slows both alike;
each side's figure is the median of its turns."""

import itertools
import platform
import resource
import statistics
import time

import horovod
import numpy as np
import torch

from benchmarks import upstream_example
from horovod_train.core import loop, mnist
from horovod_train.torch import device_data, timed_steps
from horovod_train.torch.models import build_model
from horovod_train.torch.precision import amp_settings
from horovod_train.torch.step import batch_trainer, set_lr
from horovod_train.torch.trainer import distributed_optimizer

TARGET_RATIO = 1.5  # our goal: at least 1.5x the reference's images/s
SIDES = ("ours", "reference")


def generated_split(samples: int, seed: int) -> mnist.Split:
    """Random uint8 images and labels shaped like MNIST: enough for
    throughput, which does not depend on what the pixels show."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(samples, *mnist.IMAGE_SHAPE), dtype=np.uint8)
    labels = rng.integers(0, mnist.NUM_CLASSES, size=samples, dtype=np.uint8)
    return mnist.Split(images, labels)


class OurTrainer:
    """The trainer's own pieces: the data on the device (the default
    pipeline), its optimizer set-up, its step and the epoch loop's train_epoch, run
    `steps` batches at a time at a fixed learning rate."""

    def __init__(self, model, optimizer, split: mnist.Split, batch_size: int, rank: int,
                 size: int, seed: int, lr: float, device: torch.device):
        self.model, self.optimizer, self.device, self.lr = model, optimizer, device, lr
        shards = device_data.ShardedBatches(device_data.DeviceMnist(split, device), batch_size,
                                            rank, size, seed)
        self.batches = timed_steps.every_epoch(shards)
        amp_dtype, use_scaler = amp_settings(device, "auto")
        self.train_batch = batch_trainer(
            model, optimizer, device, amp_dtype, torch.amp.GradScaler("cuda", enabled=use_scaler),
            passes=1)
        self.last_loss = float("nan")

    def run(self, steps: int) -> None:
        self.model.train()
        loss_sum, _, count = loop.train_epoch(
            self.train_batch, lambda lr: set_lr(self.optimizer, lr),
            itertools.islice(self.batches, steps), lr_at=lambda _: self.lr)
        self.last_loss = loss_sum / count


def build_sides(model_name: str, split: mnist.Split, batch_size: int, lr: float,
                momentum: float, seed: int, rank: int, size: int, device: torch.device) -> dict:
    """Both trainers, each with its own copy of the same initial network."""
    sides = {}
    for name in SIDES:
        torch.manual_seed(seed)
        model = build_model(model_name).to(device)
        optimizer = distributed_optimizer(model, lr, momentum, fp16_allreduce=False)
        if name == "ours":
            sides[name] = OurTrainer(model, optimizer, split, batch_size, rank, size, seed, lr,
                                     device)
        else:
            sides[name] = upstream_example.ReferenceTrainer(model, optimizer, split, batch_size,
                                                            rank, size, device)
    return sides


def images_per_sec(trainer, steps: int, batch_size: int, device: torch.device) -> float:
    timed_steps.wait_for_device(device)
    tic = time.perf_counter()
    trainer.run(steps)
    timed_steps.wait_for_device(device)
    return steps * batch_size / (time.perf_counter() - tic)


def alternate(sides: dict, warmup: int, steps: int, repeats: int, batch_size: int,
              device: torch.device) -> dict[str, list[float]]:
    """Warm each side up (untimed), then `repeats` rounds of one timed turn
    each, in the same order every round."""
    for trainer in sides.values():
        trainer.run(warmup)
    rates = {name: [] for name in sides}
    for _ in range(repeats):
        for name, trainer in sides.items():
            rates[name].append(images_per_sec(trainer, steps, batch_size, device))
    return rates


def peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_record(rates: dict[str, list[float]], settings: dict, sides: dict,
                 device: torch.device) -> dict:
    ours = statistics.median(rates["ours"])
    reference = statistics.median(rates["reference"])
    record = {
        **settings,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "ours": {"pipeline": "memory", "images_per_sec": ours, "turns": rates["ours"],
                 "last_loss": sides["ours"].last_loss},
        "reference": {"pipeline": "upstream pytorch_mnist.py (PIL, ToTensor, Normalize, "
                                  "DataLoader)",
                      "images_per_sec": reference, "turns": rates["reference"],
                      "last_loss": sides["reference"].last_loss},
        "ratio": ours / reference,
        "target_ratio": TARGET_RATIO,
        "meets_target": ours / reference >= TARGET_RATIO,
        "peak_rss_mib": peak_rss_mib(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "horovod": horovod.__version__},
    }
    if device.type == "cuda":
        record["peak_gpu_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return record


def format_record(record: dict) -> str:
    def turns(side: str) -> str:
        return ", ".join(f"{rate:.0f}" for rate in record[side]["turns"])

    source = f" from {record['data_dir']}" if record["data_dir"] else ""
    data = f"{record['data']} data{source}, {record['samples']} images"
    return "\n".join([
        f"trainer throughput: {record['model']}, batch {record['batch_size']}, "
        f"{record['device']} ({record['threads']} threads), {data}; "
        f"{record['repeats']} turns of {record['steps']} steps each, alternated",
        f"  ours (memory pipeline)        {record['ours']['images_per_sec']:9.1f} images/s"
        f"   (turns: {turns('ours')})",
        f"  reference (upstream example)  {record['reference']['images_per_sec']:9.1f} images/s"
        f"   (turns: {turns('reference')})",
        f"  ratio {record['ratio']:.2f} (target {record['target_ratio']}: "
        f"{'met' if record['meets_target'] else 'NOT met'}), "
        f"peak RSS {record['peak_rss_mib']:.0f} MiB",
    ])
