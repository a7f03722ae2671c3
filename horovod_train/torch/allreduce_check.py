"""The preflight's allreduce: every rank of the job, on the job's network,
sums a few float32 buffers with Horovod, checks each sum, and rank 0
prints one JSON line (`allreduce: {...}`) with the bus bandwidth of the
largest, counted as nccl-tests and benchmarks/allreduce_bench.py count it:

    algbw = bytes / time of the slowest rank;  busbw = algbw * 2(n-1)/n

busbw is what each rank's link carried, comparable with the link's rate.
On GPUs where the build has NCCL (one per rank, taken as the trainer takes
it), on the CPU else.

    horovodrun -np 4 -H a:2,b:2 python -m horovod_train.torch.allreduce_check
"""

import json
import socket
import time

from horovod_train.core import runtime
from horovod_train.core.errors import ArgumentParser, RunFailed, run_main
from horovod_train.torch import gpu

SIZES_MB = (4, 32)
ITERATIONS = 3


def bus_factor(ranks: int) -> float:
    """busbw / algbw of a ring allreduce over `ranks`."""
    return 2 * (ranks - 1) / ranks if ranks > 1 else 1.0


def main() -> int:
    parser = ArgumentParser(prog="allreduce_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--no-cuda", action="store_true", help="CPU tensors, whatever the build")
    args = parser.parse_args()
    import horovod.torch as hvd
    import torch

    runtime.start_mpi_at_the_start_barrier()
    hvd.init()
    cuda = not args.no_cuda and hvd.nccl_built() and torch.cuda.is_available()
    device = gpu.take_gpu(hvd, torch, socket.gethostname()) if cuda else torch.device("cpu")
    ranks, expected = hvd.size(), hvd.size() * (hvd.size() + 1) / 2
    rows = []
    for size_mb in SIZES_MB:
        buffer = torch.full((size_mb << 18,), float(hvd.rank() + 1), device=device)
        hvd.allreduce_(buffer, op=hvd.Sum, name=f"check.{size_mb}")  # also warms up
        if not bool((buffer == expected).all()):
            raise RunFailed(f"the sum of {size_mb} MB is wrong on rank {hvd.rank()}")
        times = []
        for iteration in range(args.iterations):
            hvd.allreduce(torch.zeros(1), name=f"barrier.{size_mb}.{iteration}")
            started = time.perf_counter()
            hvd.allreduce_(buffer, op=hvd.Sum, name=f"timed.{size_mb}")
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - started)
        slowest = hvd.allreduce(torch.tensor(times), op=hvd.Max, name=f"times.{size_mb}")
        seconds = float(slowest.mean())
        algbw = (size_mb << 20) / seconds / 1e9
        rows.append({"mb": size_mb, "seconds": seconds, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * bus_factor(ranks)})
    if hvd.rank() == 0:
        print("allreduce: " + json.dumps({"ranks": ranks, "device": device.type,
                                          "controller": "mpi" if hvd.mpi_enabled() else "gloo",
                                          "sizes": rows}), flush=True)
    hvd.shutdown()
    return 0


def cli() -> None:
    """The command's entry (python -m, on every host of the preflight)."""
    run_main(main, prog="allreduce_check")


if __name__ == "__main__":
    cli()
