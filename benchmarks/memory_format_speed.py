"""Step time of each network with its weights channels_last (NHWC, the
trainers' default) against contiguous (NCHW), side by side in one process:
forward, backward and an SGD step on one random batch, the two layouts timed
in turns (channels_last, contiguous, channels_last, ...) so that other load
on the machine slows both alike; each figure is the median of its turns.

The command; its code is horovod_train/bench/memory_format_speed.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.memory_format_speed import cli  # noqa: E402

if __name__ == "__main__":
    cli()
