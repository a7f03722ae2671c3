"""Predict throughput and scaling efficiency for layouts larger than the ones
measured, from a results.json written by benchmarks/run_matrix.sh.

The command; its code is horovod_train/bench/predict_scaling.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.predict_scaling import cli  # noqa: E402

if __name__ == "__main__":
    cli()
