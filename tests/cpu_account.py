"""The CPU time of this pytest run's own processes: every process it starts
(ranks, the emulated hosts' sshd and what it runs, Slurm's daemons and
tasks) joins a control group made for the run, whose counter the cost
table reads before and after each test. The tests running beside in
another pytest, and the image builds, in groups of their own, are not
counted: a test's CPU seconds are its own, however busy the machine was,
where its wall time grows with whatever ran beside it.

Only an accounting group is made, never one that schedules: cgroup v1's
`cpuacct` where it is mounted apart from `cpu`, or a v2 group whose parent
hands no `cpu` controller down (a new scheduling group would change the
shares that scripts/test.sh sets). Where neither can be made (not root, a
read-only hierarchy), there is no count and the table leaves it out."""

import contextlib
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_group(controller: str) -> tuple[set[str], str] | None:
    """The controllers of this process's v1 hierarchy with `controller` and
    its group there, or v2's (controller "")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        controllers = set(names.split(",")) if names else set()
        if (controller in controllers) if controller else not controllers:
            return controllers, path.lstrip("/")
    return None


def _accounting_parent() -> tuple[Path, str] | None:
    """Where to make the group, and the file that counts its CPU time."""
    v1 = _own_group("cpuacct")
    if v1 is not None and "cpu" not in v1[0] and (ROOT / "cpuacct" / "cpuacct.usage").exists():
        return ROOT / "cpuacct" / v1[1], "cpuacct.usage"
    v2 = _own_group("")
    for mount in (ROOT / "unified", ROOT):
        if v2 is not None and (mount / "cgroup.controllers").exists():
            control = mount / v2[1] / "cgroup.subtree_control"
            if control.exists() and "cpu" not in control.read_text().split():
                return mount / v2[1], "cpu.stat"
            return None
    return None


class CpuAccount:
    """The run's group: `seconds()` is the CPU time its processes have used
    (None where no group could be made); `close()` leaves and removes it."""

    def __init__(self) -> None:
        self.group: Path | None = None
        try:
            found = _accounting_parent()
            if found is None:
                return
            self.parent, self.counter = found
            # A run that ended with a daemon still in its group (killed since)
            # left the group: gone once empty.
            for left in self.parent.glob("hvt-tests-*"):
                with contextlib.suppress(OSError):
                    left.rmdir()
            group = self.parent / f"hvt-tests-{os.getpid()}"
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except OSError:
            self.group = None

    def seconds(self) -> float | None:
        if self.group is None:
            return None
        try:
            text = (self.group / self.counter).read_text()
        except OSError:
            return None
        if self.counter == "cpuacct.usage":
            return int(text) / 1e9
        fields = dict(line.split() for line in text.splitlines())
        return int(fields["usage_usec"]) / 1e6

    def close(self) -> None:
        """Back to the parent group; the group goes where nothing is left in
        it (a daemon that outlived its fixture keeps it, harmlessly)."""
        if self.group is None:
            return
        with contextlib.suppress(OSError):
            (self.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        self.group = None
