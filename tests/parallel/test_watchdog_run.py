"""The stall watchdog's parts: who it names, what it says, how it finds
rank 0 and tells a rank's process from a later one with the same pid.
Its whole behaviour (a stopped rank, a host cut off, a slow link) is
tested on the emulated hosts in test_stalls.py."""

import os
import subprocess
import sys

from horovod_train.core import watchdog


def test_a_process_is_told_from_a_later_one_with_its_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = watchdog.process_start_time(child.pid)
        assert started and started != watchdog.process_start_time(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert watchdog.process_start_time(child.pid) == ""  # gone: nothing to kill by mistake
