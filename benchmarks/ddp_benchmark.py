"""The baseline: the same timed steps as `pytorch_mnist.py --benchmark-steps`,
with PyTorch DistributedDataParallel under torchrun instead of Horovod, which
is what users would pick instead of Horovod.

The command; its code is horovod_train/bench/ddp_benchmark.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.ddp_benchmark import cli  # noqa: E402

if __name__ == "__main__":
    cli()
