"""Training throughput of our PyTorch trainer against a reference that
behaves like Horovod's own examples/pytorch/pytorch_mnist.py, side by side in
one process: the same device, network, batch size and data.

The command; its code is horovod_train/bench/trainer_throughput.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.trainer_throughput import cli  # noqa: E402

if __name__ == "__main__":
    cli()
