"""The GPU rules, framework-free. Whether this GPU host can run the build:
the NVIDIA driver must support the CUDA release torch and Horovod were built
with, the GPU's compute capability must be among the architectures Horovod's
CUDA kernels were compiled for (setup's --cuda-archs, recorded in the
environment's horovod-build.json), and every rank of the host needs a GPU of
its own, whether it sees every GPU of the host or only the one it is bound
to. Otherwise the first CUDA call fails deep inside torch (a driver too old
makes CUDA quietly unavailable), inside a Horovod kernel launch ("no kernel
image is available") or in NCCL (two ranks on one GPU), or a GPU build
trains on the CPU without a word; the trainer says why in one line instead,
before any rank trains. The preflight and the host facts ask the same rules
of every host; the trainer's side, which asks torch, is
horovod_train/torch/gpu.py."""

import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

from horovod_train.gpu import nvidia_driver

BUILD_RECORD = "horovod-build.json"  # docker/env/build_horovod.py writes it into the prefix


def driver_problem(supported: int, needed: str, driver: str | None) -> str | None:
    """nvidia_driver.py's line (the image's check shares it), in the words
    of a checkout's trainer."""
    return nvidia_driver.driver_problem(
        supported, needed, driver, "this build of torch and Horovod needs",
        "set up the CUDA 12 variant for it (scripts/setup.sh --cuda 12, docker build "
        "--build-arg CUDA=12 docker/)", "train on the CPU with --no-cuda")


def arch_number(arch: str) -> int:
    """"90a" -> 90: the capability, without the suffix of arch-specific code."""
    return int(arch.rstrip("abcdefghijklmnopqrstuvwxyz"))


def runs_on(capability: tuple[int, int], archs: list[str]) -> bool:
    """Whether code compiled for `archs` (compute capabilities such as "86",
    "90a"; the newest also as PTX) runs on a GPU of `capability`: native
    code of the same major and no higher minor runs as it is ("a" code only
    on its own GPU), and PTX no newer than the GPU is compiled by the driver."""
    major, minor = capability
    gpu = major * 10 + minor
    for arch in archs:
        if arch_number(arch) == gpu or (
                arch.isdigit() and arch_number(arch) // 10 == major and arch_number(arch) <= gpu):
            return True
    newest = max(archs, key=arch_number)  # its PTX: portable unless arch-specific
    return newest.isdigit() and arch_number(newest) <= gpu


def build_record(prefix: str | Path = sys.prefix) -> dict:
    """The environment's Horovod build record ({} where there is none: a
    Horovod built elsewhere)."""
    try:
        return json.loads((Path(prefix) / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return {}


def built_archs(prefix: str = sys.prefix) -> list[str] | None:
    """The architectures the environment's Horovod was compiled for, or None
    (no record: a Horovod built elsewhere, or without GPU operations)."""
    archs = build_record(prefix).get("cuda_archs")
    return archs.split(",") if archs else None


def architecture_problem(capability: tuple[int, int], name: str, archs: list[str]) -> str | None:
    if runs_on(capability, archs):
        return None
    major, minor = capability
    newest = max(archs, key=arch_number)
    return (f"GPU {name} has compute capability {major}.{minor}, and Horovod's CUDA kernels here "
            f"are compiled for {', '.join('sm_' + arch for arch in archs)} (PTX compute_{newest}): "
            f"rebuild with --cuda-archs {major}{minor},... (docker build --build-arg "
            f"CUDA_ARCHS=...), or train on the CPU with --no-cuda")


def visible_devices() -> str:
    """The GPUs the process was given, as the user would name them."""
    return (f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"
            if "CUDA_VISIBLE_DEVICES" in os.environ else "CUDA_VISIBLE_DEVICES unset")


def no_gpu_problem(host: str, driver_found: bool) -> str:
    """A build with NCCL GPU operations on a host where torch sees no GPU."""
    why = "torch finds no CUDA device" if driver_found else "no NVIDIA driver is loaded"
    return (f"this Horovod is built for GPUs (NCCL), and host {host} has none to use ({why}; "
            f"{visible_devices()}): give it its GPUs (docker run --gpus, "
            "docker/compose.gpu.yaml, srun --gpus-per-task), or train on the CPU with --no-cuda")


def cpu_only_problem(host: str, gpus: int | None, devices: str | None = None) -> str:
    """A Horovod built for the CPU alone on a host with GPUs: the first GPU
    tensor would reach a Horovod that cannot take it (a setup on a login
    node without GPUs, or the test command's, run on a GPU node). `gpus`:
    how many (None: some, uncounted); `devices`: what the host was given
    (default: this process's CUDA_VISIBLE_DEVICES)."""
    seen = "GPUs" if gpus is None else f"{gpus} GPU{'s' if gpus != 1 else ''}"
    return (f"this Horovod is built for the CPU alone (--gpu-ops none), and host {host} has "
            f"{seen} ({devices or visible_devices()}): set it up with GPU operations "
            "(scripts/setup.sh --gpu-ops nccl; where setup sees no GPU, --cuda 13 or 12, 12 for "
            "TensorFlow) or train on the CPU with --no-cuda")


def build_problem(host: str, nccl_built: bool, gpus: int, driver_found: bool) -> str | None:
    """The build against the GPUs a process sees, where it was asked to use
    them (no --no-cuda): a GPU build needs one, a CPU build must not meet any."""
    if nccl_built and gpus == 0:
        return no_gpu_problem(host, driver_found)
    if not nccl_built and gpus > 0:
        return cpu_only_problem(host, gpus)
    return None


def gpu_count_problem(host: str, local_ranks: int, gpus: int,
                      devices: str | None = None) -> str | None:
    """More ranks on a host than GPUs it sees, where every rank sees them
    all: NCCL refuses two ranks on one GPU, and sharing one would only slow
    both. `devices`: what the host's ranks were given (default: this
    process's CUDA_VISIBLE_DEVICES)."""
    if local_ranks <= gpus:
        return None
    return (f"host {host} runs {local_ranks} ranks and sees {gpus} GPU{'s' if gpus != 1 else ''} "
            f"({devices or visible_devices()}): one GPU per rank; give it at most {gpus} "
            f"(-H {host}:{gpus}) or more GPUs")


def device_index(local_rank: int, visible: int) -> int | None:
    """The GPU a rank takes among the `visible` ones it sees: the only one
    where it sees one (a rank bound to its own GPU: Slurm's
    --gpus-per-task=1, a pod per GPU, a wrapper setting CUDA_VISIBLE_DEVICES
    per rank), else the one of its local rank; None where there is none for
    it. Whether another rank of the host took the same physical GPU,
    binding_problem tells once every rank has said."""
    if visible == 1:
        return 0
    return local_rank if local_rank < visible else None


class Taken(NamedTuple):
    """What one rank says of its GPU, gathered from every rank."""
    host: str
    gpu: str | None  # its identity (UUID), None: no GPU left for this rank
    visible: int  # how many GPUs the rank sees
    devices: str  # how it was given them (CUDA_VISIBLE_DEVICES)


def binding_problem(taken: list[Taken]) -> str | None:
    """Every rank's GPU, in rank order: a host whose ranks outnumber the
    GPUs they see, or two ranks of a host on one GPU (NCCL would refuse
    them, or both would run at half speed), named in one line with the ways
    to one GPU each; None where each rank has a GPU of its own."""
    for said in taken:
        if said.gpu is None:
            ranks_there = sum(other.host == said.host for other in taken)
            return gpu_count_problem(said.host, ranks_there, said.visible, said.devices)
    first_on: dict[tuple[str, str], int] = {}
    for rank, said in enumerate(taken):
        where = (said.host, said.gpu)
        if where in first_on:
            return (f"host {said.host}: ranks {first_on[where]} and {rank} both took GPU "
                    f"{said.gpu} ({said.devices}): one GPU per rank; let each rank see every "
                    "GPU of the host (it takes the one of its local rank) or bind one each "
                    "(srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank), or run fewer "
                    "ranks there")
        first_on[where] = rank
    return None
