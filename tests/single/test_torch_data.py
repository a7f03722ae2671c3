"""The DataLoader pipeline (--data-pipeline loader) as the trainer drives it:
epochs of device batches through LoaderBatches, reshuffled per epoch by the
DistributedSampler, every sample once per epoch across ranks."""

import numpy as np
import torch

from horovod_train.core import mnist
from horovod_train.torch import dataloader

CPU = torch.device("cpu")


def labelled_split(n: int) -> mnist.Split:
    """Labels 0..9 repeating, images carrying the index in one pixel (n <= 256)."""
    images = np.zeros((n, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n)
    return mnist.Split(images, (np.arange(n) % 10).astype(np.uint8))


def epoch_ids(batches: dataloader.LoaderBatches, epoch: int) -> list[int]:
    ids = []
    for images, labels in batches.epoch(epoch):
        assert images.device == CPU and images.shape[1:] == (1, 28, 28)
        index = torch.round((images[:, 0, 0, 0] * mnist.STD + mnist.MEAN) * 255).long()
        assert labels.tolist() == (index % 10).tolist()
        ids += index.tolist()
    return ids


def loader_batches(n: int, rank: int, size: int, seed: int = 0) -> dataloader.LoaderBatches:
    loader, sampler = dataloader.train_loader(dataloader.MnistTensors(labelled_split(n)), 16,
                                              rank, size, seed, workers=0, pin_memory=False)
    return dataloader.LoaderBatches(loader, sampler, CPU)


def test_every_sample_once_per_epoch_across_ranks():
    shards = [epoch_ids(loader_batches(200, rank, 3), epoch=1) for rank in range(3)]
    assert len({len(s) for s in shards}) == 1
    seen = [i for shard in shards for i in shard]
    assert set(seen) == set(range(200)) and len(seen) - 200 < 3


def test_epochs_reshuffle_and_repeat_for_a_seed():
    batches = loader_batches(200, 0, 2, seed=4)
    first = epoch_ids(batches, 0)
    assert first != epoch_ids(batches, 1)
    assert first == epoch_ids(loader_batches(200, 0, 2, seed=4), 0)
    assert len(batches) == -(-100 // 16)
