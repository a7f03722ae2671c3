"""The in-memory pipeline (device_data.py), as a specification: every sample
once per epoch across ranks, equal batch counts, a new order each epoch, the
same order for a seed, and batches identical to what the DataLoader path and
a torchvision-style dataset give for the same samples."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from benchmarks.upstream_example import TorchvisionStyleMnist
from horovod_train.core import mnist, sharding
from horovod_train.torch import dataloader, device_data

CPU = torch.device("cpu")


def indexed_split(n: int) -> mnist.Split:
    """Images that carry their own index in two pixels (low byte, high
    byte), so a batch says which samples it holds."""
    images = np.zeros((n, *mnist.IMAGE_SHAPE), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n) % 256
    images[:, 0, 1] = np.arange(n) // 256
    return mnist.Split(images, (np.arange(n) % 10).astype(np.uint8))


def random_split(n: int, seed: int = 0) -> mnist.Split:
    rng = np.random.default_rng(seed)
    return mnist.Split(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                       rng.integers(0, 10, n, dtype=np.uint8))


def sample_ids(images: torch.Tensor) -> list[int]:
    """Undo the normalisation and read the index pixels back."""
    pixels = torch.round((images[:, 0, 0, :2] * mnist.STD + mnist.MEAN) * 255).long()
    return (pixels[:, 0] + 256 * pixels[:, 1]).tolist()


def epoch_ids(shards: device_data.ShardedBatches, epoch: int) -> list[list[int]]:
    """The sample indices of each batch of one epoch, checking labels too."""
    batches = []
    for images, labels in shards.epoch(epoch):
        ids = sample_ids(images)
        assert labels.tolist() == [i % 10 for i in ids]
        batches.append(ids)
    return batches


@pytest.mark.parametrize("n, size, batch", [(1000, 1, 64), (1000, 4, 32), (10, 3, 4),
                                            (7, 7, 2), (5, 8, 3), (300, 2, 300)])
def test_every_sample_once_per_epoch_across_ranks(n, size, batch):
    data = device_data.DeviceMnist(indexed_split(n), CPU)
    per_rank = [epoch_ids(device_data.ShardedBatches(data, batch, rank, size, seed=7), epoch=2)
                for rank in range(size)]
    counts = {len(batches) for batches in per_rank}
    assert counts == {len(device_data.ShardedBatches(data, batch, 0, size, 7))}  # equal steps
    for batches in per_rank:
        assert all(len(b) == batch for b in batches[:-1]) and 0 < len(batches[-1]) <= batch
    seen = [i for batches in per_rank for b in batches for i in b]
    assert set(seen) == set(range(n))
    assert len(seen) - n < size  # padding only to even the ranks out


def test_order_is_new_each_epoch_and_repeats_for_a_seed():
    data = device_data.DeviceMnist(indexed_split(1000), CPU)
    first = epoch_ids(device_data.ShardedBatches(data, 50, 0, 2, seed=1), 0)
    assert first != epoch_ids(device_data.ShardedBatches(data, 50, 0, 2, seed=1), 1)
    assert first == epoch_ids(device_data.ShardedBatches(data, 50, 0, 2, seed=1), 0)
    assert first != epoch_ids(device_data.ShardedBatches(data, 50, 0, 2, seed=2), 0)
    # Shuffled, not merely rotated: not in index order within a batch either.
    assert first[0] != sorted(first[0])


def test_reads_exactly_the_shards_of_sharding_epoch_indices():
    """The sampler semantics (and so resume) come from sharding.py, which
    test_sharding.py checks."""
    data = device_data.DeviceMnist(indexed_split(500), CPU)
    shards = device_data.ShardedBatches(data, 64, 1, 3, seed=5)
    read = [i for batch in epoch_ids(shards, 4) for i in batch]
    assert read == sharding.epoch_indices(500, 1, 3, 4, 5).tolist()


def test_batches_equal_the_loader_paths_for_the_same_samples():
    split = random_split(700)
    indices = sharding.epoch_indices(len(split), 0, 1, epoch=0, seed=3)
    memory = list(device_data.DeviceMnist(split, CPU).batches(indices, 64))
    loader = DataLoader(dataloader.MnistTensors(split), batch_size=64, sampler=indices.tolist())
    assert len(memory) == len(loader) == 11
    for (images, labels), (loader_images, loader_labels) in zip(memory, loader, strict=True):
        assert images.dtype == loader_images.dtype == torch.float32
        assert images.shape == loader_images.shape
        assert torch.equal(images, loader_images)
        assert torch.equal(labels, loader_labels)


def test_normalisation_equals_torchvision_to_tensor_and_normalize():
    split = random_split(200, seed=1)
    images, _ = next(device_data.DeviceMnist(split, CPU).batches(np.arange(200), 200))
    reference = TorchvisionStyleMnist(split)
    expected = torch.stack([reference[i][0] for i in range(200)])
    torch.testing.assert_close(images, expected, rtol=0, atol=1e-6)
    assert images.mean().abs() > 0.5  # uniform noise is far from MNIST's statistics


def test_data_is_uint8_on_the_device_not_float():
    data = device_data.DeviceMnist(random_split(100), CPU)
    assert data.images.dtype == torch.uint8 and data.images.shape == (100, 28, 28)
    assert data.images.device == CPU and data.labels.dtype == torch.int64


@pytest.mark.parametrize("n, size, batch", [(8000, 1, 64), (8000, 2, 64), (1001, 4, 50)])
def test_as_many_batches_per_epoch_as_the_loader_path(n, size, batch):
    """Both pipelines run the same number of steps, so switching keeps the
    learning-rate schedule."""
    data = device_data.DeviceMnist(random_split(n), CPU)
    memory = device_data.ShardedBatches(data, batch, size - 1, size, seed=0)
    loader, _ = dataloader.train_loader(dataloader.MnistTensors(random_split(n)), batch,
                                        size - 1, size, seed=0, workers=0, pin_memory=False)
    assert len(memory) == len(loader) == sum(1 for _ in memory.epoch(0))


def test_eval_batches_cover_each_ranks_slice_in_order():
    data = device_data.DeviceMnist(indexed_split(25), CPU)
    slices = [[i for images, _ in device_data.EvalBatches(data, 4, rank, 3)
               for i in sample_ids(images)] for rank in range(3)]
    assert slices == [list(range(rank, 25, 3)) for rank in range(3)]
