"""What the recipe's two compiled wheels (build_horovod.py's Horovod,
mpi4py_wheel.py's mpi4py) share: where they are kept, and how a tool's
version goes into their keys. Standard library only, loaded by path beside
them (the image's first layers have no package of the project)."""

import contextlib
import fcntl
import os
import subprocess
from pathlib import Path


def default_cache_dir() -> Path:
    """HVT_WHEEL_CACHE, else ~/.cache/horovod-train/wheels (under
    XDG_CACHE_HOME if set)."""
    if os.environ.get("HVT_WHEEL_CACHE"):
        return Path(os.environ["HVT_WHEEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "horovod-train" / "wheels"


@contextlib.contextmanager
def compiling_alone(cache: Path, tool: str, log):
    """One process at a time looks up, and compiles, `tool`'s wheel in this
    cache: a second one (an image's build beside the machine's setup) waits
    for the first, then takes the wheel it left instead of compiling it
    again. flock: the kernel lets go when the holder ends, however it ends.
    A cache this process cannot write is read as it is, unlocked."""
    with contextlib.ExitStack() as held:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            handle = held.enter_context(open(cache / f".{tool}.lock", "a"))
        except OSError:
            handle = None
        if handle is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log(f"another process is compiling {tool} into {cache}: waiting for it")
                fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def first_line(command: list[str]) -> str | None:
    """The first line a command prints (stdout, else stderr), or None where
    it is missing, fails or hangs."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (result.stdout or result.stderr).strip()
    return text.splitlines()[0] if result.returncode == 0 and text else None


def without_program(line: str) -> str:
    """"g++-12 (Debian 12.2.0-14) 12.2.0" and "c++ (Debian 12.2.0-14) 12.2.0"
    are one compiler: a key keeps what follows the program's name."""
    return line.split(" ", 1)[-1]
