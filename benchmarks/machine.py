"""The machine a benchmark ran on, for every JSON the benchmarks write: a
figure means little without the CPU, the GPU and the code that gave it.

machine_record() fails on nothing: what this machine cannot tell (no GPU,
no nvidia-smi, no git checkout) is null. result_origin() reads the machine
and commit back out of any result JSON, whichever shape it was written in
(tests/single/test_results_attributed.py holds every committed one to it).
"""

import datetime
import os
import platform
import re
import socket
from dataclasses import dataclass
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


# --- what a committed result names ----------------------------------------------

SHA = re.compile(r"[0-9a-f]{40}")
# The words an `attributed` text holds where the memory was never recorded:
# only then may memory_gib be null.
MEMORY_NOT_RECORDED = "memory not recorded"
MACHINE_NAME = "CPU model or GPU name and driver"


@dataclass
class ResultOrigin:
    """The machine and commit a result names, and what it lacks of them."""

    cpu_model: str | None
    cpu_cores: int | None
    memory_gib: float | None
    gpus: list[dict]
    commit: str | None
    tree_clean: bool | None
    inputs: list[str]  # a prediction's inputs' source, as it names them
    missing: list[str]


def result_origin(record: dict, predicted: bool = False) -> ResultOrigin:
    """The machine and commit a result JSON names, whichever of the shapes
    the benchmarks wrote over time it has:

    - `machine`: machine_record()'s block, or one added afterwards whose
      `attributed` says where its values came from;
    - `environment`: the older block of the matrix and allreduce_bench.py
      (CPU model, cores, GPU names, git_commit with "-dirty" or "+changes"
      for a tree with uncommitted changes; no memory, no GPU driver);
    - `versions.commit`: the trainer's summary.json (a commit, no machine).

    Named means: the machine by its CPU model or a GPU's name and driver,
    with its cores and memory (memory_gib may be null only where
    `attributed` says "memory not recorded"); the commit as a full sha with
    whether the tree was clean. A prediction (`predicted`: computed, not
    measured) needs no machine: the commit it was computed at and its
    inputs' source (prediction_inputs) instead."""
    machine = record.get("machine") if isinstance(record.get("machine"), dict) else {}
    environment = (record.get("environment") if isinstance(record.get("environment"), dict)
                   else {})
    versions = record.get("versions") if isinstance(record.get("versions"), dict) else {}
    gpus = machine.get("gpus") or [{"name": name, "driver": None}
                                   for name in environment.get("gpus") or []]
    commit, tree_clean = machine.get("commit"), machine.get("tree_clean")
    if commit is None:
        commit, tree_clean = split_commit(environment.get("git_commit")
                                          or versions.get("commit"))
    origin = ResultOrigin(
        cpu_model=machine.get("cpu_model") or environment.get("cpu_model"),
        cpu_cores=machine.get("cpu_cores") or environment.get("cpu_cores"),
        memory_gib=machine.get("memory_gib"), gpus=gpus, commit=commit,
        tree_clean=tree_clean, inputs=prediction_inputs(record), missing=[])
    if not (isinstance(commit, str) and SHA.fullmatch(commit)):
        origin.missing.append("commit")
    if not isinstance(tree_clean, bool):
        origin.missing.append("whether the tree was clean")
    if predicted:
        if not origin.inputs:
            origin.missing.append("inputs' source")
        return origin
    if not (origin.cpu_model or any(gpu.get("name") and gpu.get("driver") for gpu in gpus)):
        origin.missing.append(MACHINE_NAME)
    if not origin.cpu_cores:
        origin.missing.append("cpu_cores")
    if origin.memory_gib is None and MEMORY_NOT_RECORDED not in (machine.get("attributed")
                                                                 or ""):
        origin.missing.append("memory_gib")
    return origin


def split_commit(named: str | None) -> tuple[str | None, bool | None]:
    """An older record's commit ("SHA", "SHA-dirty" or "SHA+changes") as
    the sha and whether the tree was clean."""
    if not isinstance(named, str):
        return None, None
    for mark in ("-dirty", "+changes"):
        if named.endswith(mark):
            return named[: -len(mark)], False
    return named, True


def prediction_inputs(record: dict) -> list[str]:
    """Where a prediction's inputs came from, as it names them: the measured
    results.json it was fitted to (`results`), the predictor's command line
    (`command`: its given figures and timeline file), each published run's
    `source` (`comparisons`), or `inputs_source`, added afterwards."""
    named = [record.get("results"), record.get("command"), record.get("inputs_source")]
    named += [c.get("source") for c in record.get("comparisons") or [] if isinstance(c, dict)]
    return [text for text in named if isinstance(text, str) and text]


def is_prediction(path: Path) -> bool:
    """A result computed, not measured: predicted-*/ folders and
    prediction-*.json files."""
    return path.name.startswith("prediction-") or any(
        part.startswith("predicted-") for part in path.parts)
