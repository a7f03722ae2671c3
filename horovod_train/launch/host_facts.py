"""What one host brings to a job, as the preflight compares hosts
(launch/preflight.py): the checkout the job runs from, the Python, the
Horovod build, the GPUs and their driver, /dev/shm, the free disk where the
job writes, and the host's clock.

    python -m horovod_train.launch.host_facts [--node NAME] [--workdir DIR]

prints one JSON line. The preflight runs it on every host over ssh (or in
a Slurm step), in the job's working directory and under the job's Python,
as horovodrun will start the ranks there. Standard library only, and quick:
no framework is imported (the Horovod build is read from its files and its
record, the GPUs from the driver's library).
"""

import ctypes
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, run_main
from horovod_train.gpu import nvidia_driver
from horovod_train.gpu import rules as gpu_rules

# Where each framework's Horovod library lies in the package.
FRAMEWORK_LIBRARIES = {"pytorch": "torch/mpi_lib_v2*.so", "tensorflow": "tensorflow/mpi_lib*.so",
                       "mxnet": "mxnet/mpi_lib*.so"}
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75  # <cuda.h>
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
GIT_TIMEOUT_S = 10


def checkout(directory: Path) -> dict:
    """The git commit of the checkout at `directory`, and whether files
    tracked there differ from it; or why there is none."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S)
    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"error": f"{directory} is not a git checkout"}
        changed = git("status", "--porcelain", "--untracked-files=no")
    except FileNotFoundError:
        return {"error": "git is not installed"}
    except subprocess.TimeoutExpired:
        return {"error": f"git did not answer within {GIT_TIMEOUT_S} s"}
    return {"commit": head.stdout.strip(), "modified": bool(changed.stdout.strip())}


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def horovod_build() -> dict:
    """The Horovod this Python imports: its version, the frameworks its
    libraries serve, one digest over those libraries (two builds of the
    same sources and flags on different machines may still differ: the
    digest names the build, not whether two builds are compatible), and
    the build's record where the project built it."""
    spec = find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return {"error": "Horovod is not installed for this Python"}
    package = Path(next(iter(spec.submodule_search_locations)))
    digest = hashlib.sha256()
    frameworks = []
    for framework, pattern in FRAMEWORK_LIBRARIES.items():
        for library in sorted(package.glob(pattern)):
            frameworks.append(framework)
            digest.update(library.name.encode() + file_digest(library).encode())
    version_file = package / "__init__.py"
    version = next((line.split("=", 1)[1].strip().strip("'\"") for line in
                    version_file.read_text().splitlines() if line.startswith("__version__")),
                   None) if version_file.exists() else None
    record = gpu_rules.build_record()
    return {"version": version, "frameworks": sorted(set(frameworks)),
            "digest": digest.hexdigest()[:16] if frameworks else None,
            "gpu_ops": record.get("gpu_ops"), "cuda": record.get("cuda"),
            "cuda_archs": record.get("cuda_archs")}


def gpus() -> dict:
    """The GPUs the driver shows this process (CUDA_VISIBLE_DEVICES applies)
    and the CUDA release the driver supports; {} where there is no driver.
    per_task: the GPUs Slurm gives each task of the job (its
    --gpus-per-task, which this Slurm task inherits too): each rank then
    sees its own, and this task sees one task's share, not the node's."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return {}
    found: dict = {"driver_cuda": nvidia_driver.driver_cuda_version(),
                   "driver": nvidia_driver.driver_version(),
                   "visible": gpu_rules.visible_devices(),
                   "per_task": os.environ.get("SLURM_GPUS_PER_TASK") or None}
    count = ctypes.c_int()
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return {**found, "count": 0, "capabilities": []}
    capabilities = []
    for index in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        libcuda.cuDeviceGet(ctypes.byref(device), index)
        libcuda.cuDeviceGetAttribute(ctypes.byref(major),
                                     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        libcuda.cuDeviceGetAttribute(ctypes.byref(minor),
                                     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        capabilities.append([major.value, minor.value])
    return {**found, "count": count.value, "capabilities": capabilities}


def space(path: Path) -> int | None:
    """Bytes free to this user at `path` (its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def torch_cuda() -> str | None:
    """The CUDA release torch was built for, from its version file (not
    imported: a second or two per host)."""
    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    for line in version_file.read_text().splitlines() if version_file.exists() else []:
        if line.startswith("cuda"):
            value = line.split("=", 1)[1].strip().strip("'\"")
            return None if value == "None" else value
    return None


def facts(node: str, workdir: Path, directory: Path | None = None) -> dict:
    """This host's facts, for the job that runs in `directory` (default:
    the working directory) and writes in `workdir`."""
    directory = directory or Path.cwd()
    shm = Path("/dev/shm")
    return {
        "node": node,
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "cwd": str(directory),
        "checkout": checkout(directory),
        "horovod": horovod_build(),
        "torch_cuda": torch_cuda(),
        "gpus": gpus(),
        "shm_bytes": shutil.disk_usage(shm).total if shm.is_dir() else None,
        "workdir": str(workdir),
        "free_bytes": space(workdir),
        "time": time.time(),
    }


def main() -> int:
    parser = ArgumentParser(prog="host_facts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                        help="the name the job knows this host by (default: Slurm's name for "
                             "it, else its hostname)")
    parser.add_argument("--workdir", type=Path, default=Path.cwd(),
                        help="where the job writes (default: the working directory)")
    args = parser.parse_args()
    print(json.dumps(facts(args.node, args.workdir.absolute())), flush=True)
    return 0


def cli() -> None:
    """The command's entry (python -m, on every host of the preflight)."""
    run_main(main, prog="host_facts")


if __name__ == "__main__":
    cli()
