"""Epoch shards behave like DistributedSampler: every sample once per epoch
across ranks, equal counts, a new order each epoch, the same for a seed."""

import math

import numpy as np
import pytest

from horovod_train.core.sharding import (
    batches_per_epoch,
    elastic_batch,
    epoch_indices,
    epoch_order,
    eval_indices,
    shard_size,
)


@pytest.mark.parametrize("num_samples, size", [(8000, 4), (10, 3), (7, 7), (5, 8)])
def test_every_sample_is_read_once_per_epoch_across_ranks(num_samples, size):
    shards = [epoch_indices(num_samples, r, size, epoch=3, seed=42) for r in range(size)]
    assert len({len(s) for s in shards}) == 1  # equal steps on every rank
    seen = np.concatenate(shards)
    assert set(seen.tolist()) == set(range(num_samples))
    assert len(seen) - num_samples < size  # padding only to even the ranks out


def test_order_changes_with_the_epoch_and_repeats_with_the_seed():
    a = epoch_indices(1000, 0, 2, epoch=0, seed=1)
    assert not np.array_equal(a, epoch_indices(1000, 0, 2, epoch=1, seed=1))
    assert np.array_equal(a, epoch_indices(1000, 0, 2, epoch=0, seed=1))
    assert not np.array_equal(a, epoch_indices(1000, 0, 2, epoch=0, seed=2))


def test_unshuffled_shards_interleave_like_the_sampler():
    assert epoch_indices(6, 1, 2, 0, 0, shuffle=False).tolist() == [1, 3, 5]


def test_test_slices_are_disjoint_and_cover_everything():
    slices = [eval_indices(10, r, 3) for r in range(3)]
    assert sorted(np.concatenate(slices).tolist()) == list(range(10))


def elastic_epoch(num_samples: int, batch_size: int, sizes: list[int]) -> list[np.ndarray]:
    """The batches every rank trains on in one epoch, the number of ranks
    changing each step as `sizes` says (the last one repeats)."""
    order, done, step, batches = epoch_order(num_samples, 0, 7), 0, 0, []
    while done < num_samples:
        size = sizes[min(step, len(sizes) - 1)]
        batches += [elastic_batch(order, done, rank, size, batch_size) for rank in range(size)]
        done, step = min(num_samples, done + size * batch_size), step + 1
    return batches


@pytest.mark.parametrize("sizes", [[4], [4, 4, 2], [2, 4, 1, 3], [3, 3, 8]])
def test_an_elastic_epoch_reads_every_sample_once_however_the_ranks_change(sizes):
    batches = elastic_epoch(1000, 16, sizes)
    assert all(len(b) > 0 for b in batches)  # no rank without a sample
    seen = np.concatenate(batches)
    assert set(seen.tolist()) == set(range(1000))
    assert len(seen) - 1000 < max(sizes)  # padding only in the last step


def test_an_elastic_epoch_with_fixed_ranks_is_the_epochs_shuffle():
    order = epoch_order(100, 2, 5)
    assert np.array_equal(np.sort(order), np.arange(100))
    assert np.array_equal(elastic_batch(order, 40, 1, 2, 10), order[40:60][1::2])


def test_a_shard_is_the_count_padded_to_a_multiple_of_the_ranks():
    assert shard_size(8000, 2) == 4000
    assert shard_size(8000, 3) == 2667  # 8001 samples dealt out, one repeated
    assert shard_size(1, 4) == 1
    assert all(len(epoch_indices(8000, rank, 3, 0, 42)) == 2667 for rank in range(3))


@pytest.mark.parametrize("num_samples", [1, 7, 64, 1000, 1001])
@pytest.mark.parametrize("size, batch_size", [(1, 64), (2, 64), (3, 10), (4, 1000)])
def test_batches_per_epoch_is_each_ranks_padded_shard_in_batches(num_samples, size, batch_size):
    """The one count every trainer uses: each rank's shard cut into batches,
    the same as the elastic run's steps of size x batch_size samples."""
    count = batches_per_epoch(num_samples, size, batch_size)
    shard = epoch_indices(num_samples, 0, size, epoch=0, seed=1)
    assert count == len(range(0, len(shard), batch_size))
    assert count == math.ceil(num_samples / (size * batch_size))
