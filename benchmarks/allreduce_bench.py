"""Allreduce micro-benchmark: bus bandwidth against message size, the way
nccl-tests reports it, for Horovod, torch.distributed and plain MPI side by
side on the same processes and hosts.

The command; its code is horovod_train/bench/allreduce_bench.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.allreduce_bench import cli  # noqa: E402

if __name__ == "__main__":
    cli()
