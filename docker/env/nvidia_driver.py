"""The NVIDIA driver against a CUDA build: the oldest driver of each CUDA
major, what the installed driver supports, and the one line that says a
driver is too old with its ways out. One file for the two places that
check: the GPU image's entrypoint (check_driver.py beside this file, before
any of the project is in the container) and the trainer and the preflight
(horovod_train/gpu/rules.py, which imports this file through a link in the
package); and setup's choice of torch's CUDA major by the driver, before it
installs anything (setup.sh runs this file: --choose-cuda). Standard library
only."""

import argparse
import ctypes
import re
import sys
from pathlib import Path

DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
# The oldest Linux driver of each CUDA major (NVIDIA's CUDA release notes):
# every minor release of a major runs on its first driver (CUDA's minor
# version compatibility), so the check compares majors.
FIRST_DRIVER = {12: "525.60.13", 13: "580.65.06"}


def cuda_text(version: int) -> str:
    """The driver API's number as a release: 12040 -> 12.4."""
    return f"{version // 1000}.{version % 1000 // 10}"


def driver_cuda_version() -> int | None:
    """The CUDA release the installed driver supports (cuDriverGetVersion of
    its libcuda: 12020 is CUDA 12.2), or None where no NVIDIA driver is
    installed."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int()
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value


def driver_version() -> str | None:
    """The driver's release, 580.65.06, from NVML (a container runtime
    mounts it with the utility capability), else from the kernel module's
    file, where the host exposes either."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        text = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(text, 96) == 0:
            return text.value.decode()
    except (OSError, AttributeError):
        pass
    try:
        found = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", DRIVER_VERSION_FILE.read_text())
    except OSError:
        return None
    return found[1] if found else None


def driver_problem(supported: int, needed: str, driver: str | None, built: str,
                   cuda12: str, otherwise: str) -> str | None:
    """Why a driver that supports CUDA `supported` (12040) cannot run a build
    for CUDA `needed` ("13.0"), or None. A driver of the same major runs it
    (a 12.2 driver runs a 12.8 build): only a PTX the driver must compile
    would need the newer minor, and the build's kernels are native code for
    every architecture it lists. `built` names the build ("this image is
    built for"), `cuda12` the CUDA 12 variant's way, `otherwise` the way
    without a GPU."""
    major = int(needed.split(".")[0])
    if supported // 1000 >= major:
        return None
    first = FIRST_DRIVER.get(major)
    return (f"the NVIDIA driver{f' {driver}' if driver else ''} supports CUDA up to "
            f"{cuda_text(supported)}, and {built} CUDA {needed}"
            + (f" (driver {first} or newer)" if first else "")
            + (f": {cuda12}," if supported // 1000 == 12 else ":")
            + " update the driver (on data-centre GPUs NVIDIA's cuda-compat package also "
            f"serves), or {otherwise}")


SETUP_DOING = "setting up torch for CUDA {major} (its own lock)"
SETUP_OTHERWISE = "set up for the CPU (--gpu-ops none)"


def release(driver: str) -> tuple[int, ...]:
    """"580.65.06" -> (580, 65, 6), for comparing releases."""
    if not re.fullmatch(r"\d+(\.\d+)*", driver):
        raise ValueError(f"{driver!r} is not a driver release such as 580.65.06")
    return tuple(int(part) for part in driver.split("."))


def cuda_for_driver(driver: str, otherwise: str) -> int:
    """The newest CUDA major the driver runs, by the first driver of each
    (FIRST_DRIVER); a ValueError of one line when it runs none of them,
    ending in `otherwise`, the way without a GPU."""
    for major in sorted(FIRST_DRIVER, reverse=True):
        if release(driver) >= release(FIRST_DRIVER[major]):
            return major
    oldest = min(FIRST_DRIVER)
    raise ValueError(f"the NVIDIA driver {driver} is older than {FIRST_DRIVER[oldest]}, the first "
                     f"of CUDA {oldest}, the oldest CUDA of any torch here: update the driver, "
                     f"or {otherwise}")


def choose_cuda(driver: str | None, doing: str = SETUP_DOING,
                otherwise: str = SETUP_OTHERWISE) -> tuple[int | None, str | None]:
    """The CUDA major to install torch for, by the driver found, and the
    line that says why where it is not the newest; (None, None) without a
    driver. `doing` says what the older major means ("{major}" in it), and
    `otherwise` the way without a GPU. setup.sh's and build_image.sh's rule."""
    if driver is None:
        return None, None
    major = cuda_for_driver(driver, otherwise)
    newest = max(FIRST_DRIVER)
    if major == newest:
        return major, None
    return major, (f"the NVIDIA driver {driver} predates CUDA {newest}'s first driver "
                   f"({FIRST_DRIVER[newest]}): {doing.format(major=major)}; --cuda {newest} "
                   "after updating the driver")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="setup.sh", description="Print the CUDA major setup installs torch for, by the "
        "NVIDIA driver (nothing without one).")
    parser.add_argument("--choose-cuda", action="store_true", required=True)
    parser.add_argument("--driver", help="the driver's release (default: the installed one's)")
    args = parser.parse_args(argv)
    try:
        major, why = choose_cuda(args.driver or driver_version())
    except ValueError as err:
        print(f"setup.sh: error: {err}", file=sys.stderr)
        return 2
    if why:
        print(f"setup.sh: {why}", file=sys.stderr)
    if major is not None:
        print(major)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
