"""Which samples each rank reads in an epoch, without any framework: the
semantics of PyTorch's DistributedSampler (every sample once per epoch across
ranks, a new shuffle each epoch, the same order for the same seed and epoch,
so a resumed run reads what an uninterrupted one would)."""

import numpy as np


def epoch_indices(num_samples: int, rank: int, size: int, epoch: int, seed: int,
                  shuffle: bool = True) -> np.ndarray:
    """This rank's sample indices for `epoch`. The permutation is padded by
    repeating its start so that every rank gets the same count: an uneven
    count would leave ranks waiting in an allreduce."""
    if shuffle:
        order = np.random.default_rng([seed, epoch]).permutation(num_samples)
    else:
        order = np.arange(num_samples)
    per_rank = shard_size(num_samples, size)
    padding = per_rank * size - num_samples
    if padding:
        order = np.concatenate([order, np.resize(order, padding)])
    return order[rank::size]


def shard_size(num_samples: int, size: int) -> int:
    """Samples per rank and epoch: the count padded up to a multiple of size."""
    return -(-num_samples // size)


def batches_per_epoch(num_samples: int, size: int, batch_size: int) -> int:
    """Batches per rank and epoch, the same on every rank: its padded shard
    in batches, the last one short. (The same count as the elastic run's
    steps of size x batch_size samples each over the whole epoch.)"""
    return -(-shard_size(num_samples, size) // batch_size)


def eval_indices(num_samples: int, rank: int, size: int) -> np.ndarray:
    """A disjoint slice per rank, no padding: summing counts across ranks
    gives exact test metrics."""
    return np.arange(rank, num_samples, size)


def epoch_order(num_samples: int, epoch: int, seed: int) -> np.ndarray:
    """The whole epoch's shuffle, the same permutation epoch_indices deals out."""
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


def elastic_batch(order: np.ndarray, samples_done: int, rank: int, size: int,
                  batch_size: int) -> np.ndarray:
    """This rank's next batch when the number of ranks may change mid-epoch
    (Horovod Elastic): the ranks of this step share the next size x batch_size
    samples of the epoch's order after the `samples_done` already trained on,
    so after a resize the epoch goes on where it stopped, every sample once.
    The last step of an epoch is padded from the order's start so that no
    rank is left without a sample."""
    chunk = order[samples_done:samples_done + size * batch_size]
    if len(chunk) < size:
        chunk = np.concatenate([chunk, order[:size - len(chunk)]])
    return chunk[rank::size]
