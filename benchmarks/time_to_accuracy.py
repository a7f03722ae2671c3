"""Time to accuracy: how long the PyTorch trainer takes to reach a test
accuracy (98% by default) on the real digits, with a named preset of the
trainer (fast-mnist by default, the fastest configuration found).

The command; its code is horovod_train/bench/time_to_accuracy.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.time_to_accuracy import cli  # noqa: E402

if __name__ == "__main__":
    cli()
