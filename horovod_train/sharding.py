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
    per_rank = -(-num_samples // size)  # ceil
    padding = per_rank * size - num_samples
    if padding:
        order = np.concatenate([order, np.resize(order, padding)])
    return order[rank::size]


def eval_indices(num_samples: int, rank: int, size: int) -> np.ndarray:
    """A disjoint slice per rank, no padding: summing counts across ranks
    gives exact test metrics."""
    return np.arange(rank, num_samples, size)
