"""MNIST as numpy batches, for the TensorFlow and MXNet trainers: this rank's
shard of an epoch (sharding.epoch_indices, the semantics of PyTorch's
DistributedSampler) and its slice of the test split, normalised as the
PyTorch pipelines normalise."""

from collections.abc import Iterator

import numpy as np

from horovod_train.core import mnist, sharding

Batch = tuple[np.ndarray, np.ndarray]  # images (B, 28, 28) float32, labels (B,) uint8


def normalise(images: np.ndarray) -> np.ndarray:
    return mnist.normalise(images.astype(np.float32))


def batches(split: mnist.Split, indices: np.ndarray, batch_size: int) -> Iterator[Batch]:
    for start in range(0, len(indices), batch_size):
        rows = indices[start:start + batch_size]
        yield normalise(split.images[rows]), split.labels[rows]


def epoch_batches(split: mnist.Split, rank: int, size: int, epoch: int, seed: int,
                  batch_size: int) -> Iterator[Batch]:
    """This rank's training batches of an epoch."""
    indices = sharding.epoch_indices(len(split), rank, size, epoch, seed)
    return batches(split, indices, batch_size)


def eval_batches(split: mnist.Split, rank: int, size: int, batch_size: int) -> Iterator[Batch]:
    """This rank's disjoint slice of the test split, in order."""
    return batches(split, sharding.eval_indices(len(split), rank, size), batch_size)
