"""Rules of the emulated hosts' tooling that need no hosts."""

import os
import subprocess
import sys
import time

from horovod_train.emulation import cluster


def test_a_zombie_is_not_running():
    """A killed daemon whose parent has not reaped it yet (init may take
    seconds) is no longer running: `down` need not wait for its reaping."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert cluster.running(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while cluster.running(child.pid):  # a zombie until child.wait() below
            assert time.monotonic() < deadline, "the killed child still runs"
            time.sleep(0.01)
        assert os.path.exists(f"/proc/{child.pid}")  # not reaped: its entry is there
    finally:
        child.kill()
        child.wait()
    assert not cluster.running(child.pid)
