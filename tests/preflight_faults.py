"""What the preflight must name, made real on the emulated hosts, each a
context manager that undoes itself: a slow pair (tc), a host key unknown
to the launching host, another commit checked out, another Horovod build,
a small /dev/shm. The last three change one host's own view of its files:
a mount in the mount namespace of its sshd, which every process started
there over ssh shares (plain hosts see this machine's files otherwise).
tests/cluster/test_preflight.py and the tier tests/preflight use them."""

import contextlib
import json
import os
import shutil
import subprocess
from importlib.util import find_spec
from pathlib import Path

from conftest import REPO

STATE = Path(os.environ.get("HVT_EMULATE_STATE_DIR", "/run/horovod-train-cluster"))


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=30)


def addresses() -> dict[str, str]:
    return json.loads((STATE / "cluster.json").read_text())["hosts"]


def in_mounts_of(host: str, *command: str) -> None:
    """A command in the mount namespace of `host`'s sshd."""
    pid = (STATE / "hosts" / host / "ssh" / "sshd.pid").read_text().strip()
    run("nsenter", "-t", pid, "-m", *command)


@contextlib.contextmanager
def mounted_over(host: str, source: Path, target: Path):
    in_mounts_of(host, "mount", "--bind", str(source), str(target))
    try:
        yield
    finally:
        in_mounts_of(host, "umount", str(target))


@contextlib.contextmanager
def slow_pair(a: str, b: str, rate: str, others: str):
    """Every host's link limited to `others` (tc htb), and the traffic
    between a and b to `rate`, both ways."""
    where = addresses()
    try:
        for host in where:
            device = ["dev", "eth0"]
            run("ip", "netns", "exec", f"hvt-{host}", "tc", "qdisc", "replace", *device, "root",
                "handle", "1:", "htb", "default", "10")
            for classid, limit in (("1:10", others), ("1:20", rate)):
                run("ip", "netns", "exec", f"hvt-{host}", "tc", "class", "add", *device,
                    "parent", "1:", "classid", classid, "htb", "rate", limit)
            peer = {a: b, b: a}.get(host)
            if peer:
                run("ip", "netns", "exec", f"hvt-{host}", "tc", "filter", "add", *device,
                    "parent", "1:", "protocol", "ip", "u32", "match", "ip", "dst",
                    f"{where[peer]}/32", "flowid", "1:20")
        yield
    finally:
        for host in where:
            subprocess.run(["ip", "netns", "exec", f"hvt-{host}", "tc", "qdisc", "del", "dev",
                            "eth0", "root"], capture_output=True, timeout=30)


@contextlib.contextmanager
def unknown_host_key(launching: str, host: str):
    """`host`'s key taken out of the known hosts of `launching`."""
    known = STATE / "hosts" / launching / "ssh" / "ssh_known_hosts"
    kept = known.read_text()
    known.write_text("".join(line for line in kept.splitlines(keepends=True)
                             if host not in line.split(" ", 1)[0].split(",")))
    try:
        yield
    finally:
        known.write_text(kept)


@contextlib.contextmanager
def other_commit(host: str, tmp_path: Path):
    """`host`'s checkout at the commit before this one (its HEAD file)."""
    head = Path(subprocess.run(["git", "-C", str(REPO), "rev-parse", "--path-format=absolute",
                                "--git-path", "HEAD"], capture_output=True, text=True,
                               check=True).stdout.strip())
    parent = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD~1"],
                            capture_output=True, text=True, check=True).stdout.strip()
    detached = tmp_path / f"HEAD-{host}"
    detached.write_text(parent + "\n")
    with mounted_over(host, detached, head):
        yield parent


@contextlib.contextmanager
def other_horovod_build(host: str, tmp_path: Path):
    """`host`'s Horovod PyTorch library another file: one more byte."""
    package = Path(next(iter(find_spec("horovod").submodule_search_locations)))
    library = next(package.glob("torch/mpi_lib_v2*.so"))
    other = tmp_path / f"{library.name}-{host}"
    shutil.copyfile(library, other)
    with other.open("ab") as handle:
        handle.write(b"\0")
    with mounted_over(host, other, library):
        yield


@contextlib.contextmanager
def small_shm(host: str, size: str = "64m"):
    in_mounts_of(host, "mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", "/dev/shm")
    try:
        yield
    finally:
        in_mounts_of(host, "umount", "/dev/shm")
