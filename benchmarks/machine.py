"""The machine a benchmark ran on, for every JSON the benchmarks write: a
figure means little without the CPU, the GPU and the code that gave it.

machine_record() fails on nothing: what this machine cannot tell (no GPU,
no nvidia-smi, no git checkout) is null.
"""

import datetime
import os
import platform
import socket
from pathlib import Path

from benchmarks import CHECKOUT
from horovod_train.core.runtime import command_output  # None where missing or failing


def machine_record() -> dict:
    """CPU, memory and GPUs of this machine, the time (UTC) and the checkout's
    commit, with whether its tracked files matched that commit."""
    commit = command_output("git", "-C", str(CHECKOUT), "rev-parse", "HEAD")
    # Untracked files (data, results) do not change the code that ran.
    changes = command_output("git", "-C", str(CHECKOUT), "status", "--porcelain",
                             "--untracked-files=no")
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "gpus": gpus(),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "tree_clean": None if commit is None or changes is None else changes == "",
    }


def cpu_model() -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    named = next((line.split(":", 1)[1].strip() for line in lines
                  if line.startswith("model name")), None)
    return named or platform.processor() or None


def memory_gib() -> float | None:
    """MemTotal of /proc/meminfo (kB)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    total_kb = next((int(line.split()[1]) for line in lines if line.startswith("MemTotal:")),
                    None)
    return None if total_kb is None else round(total_kb / 1024**2, 1)


def gpus() -> list[dict]:
    """One {"name", "driver"} per GPU: from nvidia-smi where it runs, else
    from torch.cuda where torch is installed (no driver version there);
    empty without GPUs."""
    listed = command_output("nvidia-smi", "--query-gpu=name,driver_version",
                            "--format=csv,noheader")
    if listed:
        return [{"name": name.strip(), "driver": driver.strip()}
                for name, driver in (line.rsplit(",", 1) for line in listed.splitlines()
                                     if "," in line)]
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [{"name": torch.cuda.get_device_name(i), "driver": None}
            for i in range(torch.cuda.device_count())]
