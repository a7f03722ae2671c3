"""MNIST held whole on the training device (the default pipeline): each split
is copied there once per process as one uint8 tensor; a batch is gathered by
index and normalised on the device in one go. No DataLoader, no per-sample
Python work in the step. Each rank's shard of an epoch comes from
sharding.epoch_indices, the semantics of DistributedSampler (every sample
once per epoch across ranks, a new shuffle each epoch, the same order for a
seed and epoch, so a resumed run reads what an uninterrupted one would)."""

from collections.abc import Iterator

import numpy as np
import torch

from horovod_train.core import mnist, sharding

Batch = tuple[torch.Tensor, torch.Tensor]  # images (B, 1, 28, 28) float32, labels (B,) int64


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 (B, 28, 28) -> float32 (B, 1, 28, 28), as dataloader.MnistTensors
    does per image (mnist.normalise), so both pipelines feed the model
    identical tensors."""
    return mnist.normalise(images.float()).unsqueeze(1)


class DeviceMnist:
    """One split on `device`: 784 bytes per image (47 MB for the 60,000
    training digits), a quarter of what normalised float32 would take."""

    def __init__(self, split: mnist.Split, device: torch.device):
        self.images = torch.from_numpy(np.array(split.images, dtype=np.uint8)).to(device)
        self.labels = torch.from_numpy(split.labels.astype(np.int64)).to(device)
        self.device = device

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: torch.Tensor) -> Batch:
        """The samples at `indices` (an int64 tensor on the device)."""
        return normalise(self.images.index_select(0, indices)), self.labels.index_select(0, indices)

    def batches(self, indices: np.ndarray, batch_size: int) -> Iterator[Batch]:
        # One host-to-device copy of the indices per pass, not one per batch.
        order = torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64)).to(self.device)
        for start in range(0, len(order), batch_size):
            yield self.batch(order[start:start + batch_size])


class ShardedBatches:
    """This rank's training batches, epoch by epoch. Every rank gets the
    same number of batches (the permutation is padded as the sampler pads);
    the last batch of an epoch may be short, as with a DataLoader."""

    def __init__(self, data: DeviceMnist, batch_size: int, rank: int, size: int, seed: int):
        self.data, self.batch_size = data, batch_size
        self.rank, self.size, self.seed = rank, size, seed

    def indices(self, epoch: int) -> np.ndarray:
        return sharding.epoch_indices(len(self.data), self.rank, self.size, epoch, self.seed)

    def __len__(self) -> int:
        return sharding.batches_per_epoch(len(self.data), self.size, self.batch_size)

    def epoch(self, epoch: int) -> Iterator[Batch]:
        return self.data.batches(self.indices(epoch), self.batch_size)


class EvalBatches:
    """This rank's disjoint slice of the test split, in order, no padding:
    counts summed across ranks give exact test metrics."""

    def __init__(self, data: DeviceMnist, batch_size: int, rank: int, size: int):
        self.data, self.batch_size = data, batch_size
        self.indices = sharding.eval_indices(len(data), rank, size)

    def __iter__(self) -> Iterator[Batch]:
        return self.data.batches(self.indices, self.batch_size)
