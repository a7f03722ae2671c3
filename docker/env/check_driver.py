"""The GPU image's first check at container start (docker/entrypoint.sh):
whether the host's NVIDIA driver runs the CUDA release the image's torch
and Horovod were built for. The image asks the container runtime for no
CUDA version (no NVIDIA_REQUIRE_CUDA), so an old driver reaches this line
instead of the runtime's refusal, which names neither the driver nor the
way out. The trainer checks the same on hosts without the image
(horovod_train/torch/gpu.py).

    check_driver.py [--record PATH]

Exit 0 when the driver runs the build, or when there is nothing to check
(no NVIDIA driver in the container, a build without CUDA); else one line
`entrypoint: error: ...` and exit 2. Standard library only: it runs before
anything of the checkout is there.
"""

import argparse
import ctypes
import json
import re
import sys
from pathlib import Path

RECORD = Path("/opt/venv/horovod-build.json")  # docker/env/build_horovod.py writes it
# The oldest Linux driver of each CUDA major (NVIDIA's CUDA release notes):
# every minor release of a major runs on it (minor version compatibility).
FIRST_DRIVER = {12: "525.60.13", 13: "580.65.06"}


def driver_cuda_version() -> int | None:
    """cuDriverGetVersion of the driver's libcuda (12020 is CUDA 12.2), or
    None where the container has no NVIDIA driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int()
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value


def driver_version() -> str | None:
    """The driver's release, 535.104.05, from NVML (the runtime mounts it with
    the utility capability), else from the kernel module's file."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        text = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(text, 96) == 0:
            return text.value.decode()
    except (OSError, AttributeError):
        pass
    try:
        found = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)",
                          Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        return None
    return found[1] if found else None


def problem(supported: int, needed: str, driver: str | None) -> str | None:
    """Why a driver of CUDA `supported` (12020) cannot run a build for CUDA
    `needed` ("13.0"), or None: a driver of the build's major runs it."""
    major = int(needed.split(".")[0])
    if supported // 1000 >= major:
        return None
    first = FIRST_DRIVER.get(major)
    variant = (" build the CUDA 12 image for it (docker build --build-arg CUDA=12 docker/),"
               if supported // 1000 == 12 else "")
    return (f"the NVIDIA driver{f' {driver}' if driver else ''} supports CUDA up to "
            f"{supported // 1000}.{supported % 1000 // 10}, and this image is built for CUDA "
            f"{needed}" + (f", which needs driver {first} or newer" if first else "")
            + f":{variant} update the driver (on data-centre GPUs NVIDIA's cuda-compat package "
            "also serves), or run the CPU image (docker build --build-arg DEVICE=cpu docker/)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check_driver.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=Path, default=RECORD,
                        help="the build record whose CUDA release is checked")
    args = parser.parse_args(argv)
    try:
        needed = json.loads(args.record.read_text()).get("cuda")
    except (OSError, ValueError):
        needed = None  # a Horovod built elsewhere: nothing recorded to check
    supported = driver_cuda_version() if needed else None
    if supported is None:
        return 0
    found = problem(supported, needed, driver_version())
    if found:
        print(f"entrypoint: error: {found}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
