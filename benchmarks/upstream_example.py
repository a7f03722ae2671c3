"""The reference of benchmarks/trainer_throughput.py: a training loop that
behaves like Horovod's own examples/pytorch/pytorch_mnist.py, to measure our
trainer against (benchmarks/upstream_mnist.py runs it to a test accuracy). As
there: a torchvision-style MNIST dataset that turns each image into a PIL
image and runs ToTensor and Normalize on it, one sample at a time; a
DataLoader over a DistributedSampler (one worker and pinned memory on a GPU,
none on the CPU); a plain step of zero_grad, forward, nll_loss on log-softmax,
backward and hvd.DistributedOptimizer.step(); loss.item() every 10 batches for
the log line; the test pass over a DistributedSampler, loss and accuracy
averaged over the ranks with hvd.allreduce."""

import itertools
from collections.abc import Iterator

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torchvision import transforms

from horovod_train.core import mnist

LOG_INTERVAL = 10  # the example's --log-interval default


class TorchvisionStyleMnist(Dataset):
    """What torchvision.datasets.MNIST does per item (its data is a uint8
    tensor too), without its file layout: torchvision wants the raw files
    unpacked, ours may be gzipped."""

    def __init__(self, split: mnist.Split):
        self.data = torch.from_numpy(np.array(split.images, dtype=np.uint8))
        self.targets = torch.from_numpy(split.labels.astype(np.int64))
        self.transform = transforms.Compose([
            transforms.ToTensor(),
            transforms.Normalize((mnist.MEAN,), (mnist.STD,)),
        ])

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, target = self.data[index], int(self.targets[index])
        image = Image.fromarray(image.numpy(), mode="L")
        return self.transform(image), target


def train_loader(split: mnist.Split, batch_size: int, rank: int, size: int,
                 cuda: bool) -> tuple[DataLoader, DistributedSampler]:
    dataset = TorchvisionStyleMnist(split)
    kwargs = {"num_workers": 1, "pin_memory": True} if cuda else {}
    if cuda:
        # The example's choice where supported: forkserver, not fork.
        kwargs["multiprocessing_context"] = "forkserver"
    sampler = DistributedSampler(dataset, num_replicas=size, rank=rank)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs), sampler


def every_epoch(loader: DataLoader, sampler: DistributedSampler) -> Iterator:
    """The example's epoch loop: set_epoch, then the loader's batches with
    their index in the epoch."""
    for epoch in itertools.count(1):
        sampler.set_epoch(epoch)
        yield from enumerate(loader)


class ReferenceTrainer:
    """The example's train_epoch, run `steps` batches at a time."""

    def __init__(self, model: nn.Module, optimizer, split: mnist.Split, batch_size: int,
                 rank: int, size: int, device: torch.device):
        self.model, self.optimizer, self.device = model, optimizer, device
        loader, sampler = train_loader(split, batch_size, rank, size, device.type == "cuda")
        self.steps_per_epoch = len(loader)
        self.batches = every_epoch(loader, sampler)
        self.last_loss = float("nan")

    def run(self, steps: int) -> None:
        self.model.train()
        cuda = self.device.type == "cuda"
        for batch_idx, (data, target) in itertools.islice(self.batches, steps):
            if cuda:
                data, target = data.cuda(), target.cuda()
            self.optimizer.zero_grad()
            output = F.log_softmax(self.model(data), dim=1)
            loss = F.nll_loss(output, target)
            loss.backward()
            self.optimizer.step()
            if batch_idx % LOG_INTERVAL == 0:
                self.last_loss = loss.item()


def evaluate(model: nn.Module, split: mnist.Split, rank: int, size: int,
             device: torch.device, batch_size: int = 1000) -> dict:
    """The example's test(): each rank's share of the test split (a
    DistributedSampler, batches of 1000), its mean loss and accuracy,
    averaged over the ranks."""
    dataset = TorchvisionStyleMnist(split)
    sampler = DistributedSampler(dataset, num_replicas=size, rank=rank)
    kwargs = {"num_workers": 1, "pin_memory": True} if device.type == "cuda" else {}
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, **kwargs)
    model.eval()
    loss_sum, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = F.log_softmax(model(data), dim=1)
            loss_sum += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    figures = torch.tensor([loss_sum / len(sampler), correct / len(sampler)])
    loss, accuracy = hvd.allreduce(figures, name="upstream_example.test").tolist()
    return {"test_loss": loss, "test_accuracy": accuracy}
