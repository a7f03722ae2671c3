"""Where a run's time goes outside its training steps: each rank stamps the
end of each phase on the wall clock (mark), and rank 0's summary.json holds
them as "phases", in seconds from the process's start, with that start on
the Unix clock, so that a launcher's own clock can be set beside them
(benchmarks/time_to_accuracy.py does: the time before the first step and
after the answer). Standard library only (runtime.py imports it)."""

import os
import time
from pathlib import Path

# The phases, in the order a run goes through them.
ORDER = ("options", "imports", "horovod", "data", "first_step", "answer")

_STAMPS: dict[str, float] = {}


def mark(name: str) -> None:
    """The end of phase `name` (ORDER), the first time it ends."""
    _STAMPS.setdefault(name, time.time())


def record() -> dict:
    """The stamps so far, seconds from this process's start, and the start."""
    start = process_start()
    return {"process_start_unix": start,
            **{name: round(_STAMPS[name] - start, 3) for name in ORDER if name in _STAMPS}}


def process_start() -> float:
    """When this process started, on the Unix clock, to the kernel's tick:
    its start after boot (/proc/self/stat, field 22) set against the boot
    clock now (the boot time /proc/stat gives is whole seconds only)."""
    try:
        # The command name (field 2) may hold spaces: count from its ")".
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_after_boot = int(after_name[19]) / os.sysconf("SC_CLK_TCK")
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, IndexError, ValueError, AttributeError):
        return _IMPORTED  # not Linux: when this module was imported, near enough
    return time.time() - (since_boot - started_after_boot)


_IMPORTED = time.time()
