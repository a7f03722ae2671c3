"""What the recipe's two compiled wheels (build_horovod.py's Horovod,
mpi4py_wheel.py's mpi4py) share: where they are kept, and how a tool's
version goes into their keys. Standard library only, loaded by path beside
them (the image's first layers have no package of the project)."""

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
