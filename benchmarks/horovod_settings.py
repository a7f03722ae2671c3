"""What Horovod's and Open MPI's settings do to the training step, side by
side on this machine: the same timed steps (`pytorch_mnist.py
--benchmark-steps`, as benchmarks/run_matrix.sh times them) under
`horovodrun -np N -H localhost:N`, once per variant, the variants taking
turns run by run so that other load on the machine falls on all alike; each
figure is the median of a variant's runs.

The command; its code is horovod_train/bench/horovod_settings.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.horovod_settings import cli  # noqa: E402

if __name__ == "__main__":
    cli()
