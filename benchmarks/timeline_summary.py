"""Where Horovod's time goes, from its timeline: the file a run writes with
HOROVOD_TIMELINE=FILE (Chrome's trace format, one row per tensor): for each
activity, the time during which any tensor was in it (overlapping spans of
several tensors, and the one span of a fused buffer, count once).

The command; its code is horovod_train/bench/timeline_summary.py."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from this checkout (installed or
    # not), not from this directory.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.bench.timeline_summary import cli  # noqa: E402

if __name__ == "__main__":
    cli()
