"""MNIST for PyTorch through a DataLoader (--data-pipeline loader): the split
as one uint8 tensor, normalised per batch item on the fly; each rank reads
its shard through a DistributedSampler. For data that does not fit on the
device; device_data.py is the faster default for MNIST."""

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from horovod_train.core import mnist, sharding


class MnistTensors(Dataset):
    def __init__(self, split: mnist.Split):
        self.images = torch.from_numpy(split.images.copy())
        self.labels = torch.from_numpy(split.labels.astype("int64"))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return mnist.normalise(self.images[index].float()).unsqueeze(0), self.labels[index]


def train_loader(
    dataset: Dataset, batch_size: int, rank: int, size: int, seed: int, workers: int,
    pin_memory: bool,
) -> tuple[DataLoader, DistributedSampler]:
    """Shuffled shards, reshuffled each epoch by sampler.set_epoch(epoch). The
    sampler pads the last shard so every rank runs the same number of steps:
    an uneven count would leave ranks waiting in allreduce."""
    sampler = DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
        pin_memory=pin_memory, persistent_workers=workers > 0,
        # forkserver: forking a process that already runs Horovod's threads
        # (and possibly MPI) is unsafe.
        multiprocessing_context="forkserver" if workers > 0 else None,
    )
    return loader, sampler


class LoaderBatches:
    """A training loader as epochs of device batches, the interface of
    device_data.ShardedBatches, so the trainer drives either pipeline alike."""

    def __init__(self, loader: DataLoader, sampler: DistributedSampler, device: torch.device):
        self.loader, self.sampler, self.device = loader, sampler, device

    def __len__(self) -> int:
        return len(self.loader)

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch)
        for images, labels in self.loader:
            yield (images.to(self.device, non_blocking=True),
                   labels.to(self.device, non_blocking=True))


def test_loader(dataset: Dataset, batch_size: int, rank: int, size: int) -> DataLoader:
    """Every rank evaluates a disjoint slice, no padding, so summing the
    counts across ranks gives the exact accuracy on the whole test set."""
    shard = torch.utils.data.Subset(dataset, sharding.eval_indices(len(dataset), rank, size))
    return DataLoader(shard, batch_size=batch_size, shuffle=False)
