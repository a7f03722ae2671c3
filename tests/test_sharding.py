"""Epoch shards behave like DistributedSampler: every sample once per epoch
across ranks, equal counts, a new order each epoch, the same for a seed."""

import numpy as np
import pytest

from horovod_train.sharding import epoch_indices, eval_indices


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
