"""Horovod set-up for a PyTorch process, and the cross-rank checks."""

import hashlib
import os
import socket
from dataclasses import dataclass

import horovod.torch as hvd
import torch
from torch import nn

from horovod_train.errors import UserError


@dataclass(frozen=True)
class Runtime:
    rank: int
    size: int
    local_rank: int
    local_size: int
    device: torch.device
    controller: str  # "gloo" or "mpi"
    hostname: str
    threads: int

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def init(use_cuda: bool, threads: int | None, seed: int) -> Runtime:
    """hvd.init(), one device per local rank, CPU threads shared out among the
    ranks of a host, and the same seed everywhere so every rank builds the
    same initial model (rank 0's is broadcast anyway)."""
    hvd.init()
    if use_cuda and torch.cuda.is_available():
        index = hvd.local_rank() % torch.cuda.device_count()
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        device = torch.device("cpu")
    # Ranks on one host share its cores; oversubscribed threads thrash.
    cores = len(os.sched_getaffinity(0))
    threads = threads or max(1, cores // hvd.local_size())
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return Runtime(
        rank=hvd.rank(),
        size=hvd.size(),
        local_rank=hvd.local_rank(),
        local_size=hvd.local_size(),
        device=device,
        controller="gloo" if hvd.gloo_enabled() else "mpi",
        hostname=socket.gethostname(),
        threads=threads,
    )


def sum_across_ranks(values: list[float], name: str) -> list[float]:
    summed = hvd.allreduce(torch.tensor(values, dtype=torch.float64), op=hvd.Sum, name=name)
    return summed.tolist()


def average_buffers(model: nn.Module) -> None:
    """Average floating-point buffers (batch-norm running statistics) across
    ranks. Horovod averages gradients only, so without this every rank keeps
    its own statistics and evaluates a slightly different model."""
    for name, buf in model.named_buffers():
        if buf.is_floating_point():
            buf.copy_(hvd.allreduce(buf, op=hvd.Average, name=f"buffer.{name}"))


def state_digest(model: nn.Module) -> str:
    """SHA-256 over every parameter and buffer, in state_dict order."""
    digest = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        digest.update(key.encode())
        # Raw bytes, whatever the dtype (bf16 has no numpy twin).
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def check_all_ranks(step, name: str):
    """Run `step` on every rank and stop every rank if any of them failed.

    A UserError on one rank alone (data missing on one host, an unwritable
    directory on rank 0) would otherwise leave the healthy ranks waiting in
    their next collective; here all ranks learn of it and exit with the same
    one-line message, naming the rank and host that failed."""
    try:
        result, error = step(), None
    except UserError as err:
        result, error = None, f"{err} (rank {hvd.rank()} on {socket.gethostname()})"
    errors = [e for e in hvd.allgather_object(error, name=name) if e]
    if errors:
        raise UserError(errors[0] if error is None else error)
    return result
