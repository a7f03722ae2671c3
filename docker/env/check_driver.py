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
anything of the checkout is there; the driver's rules are nvidia_driver.py's,
beside it, which the trainer reads too.
"""

import argparse
import json
import sys
from pathlib import Path

from nvidia_driver import driver_cuda_version, driver_problem, driver_version  # beside this file

RECORD = Path("/opt/venv/horovod-build.json")  # docker/env/build_horovod.py writes it


def problem(supported: int, needed: str, driver: str | None) -> str | None:
    """nvidia_driver.py's line, in the image's words."""
    return driver_problem(supported, needed, driver, "this image is built for",
                          "build the CUDA 12 image for it (docker build --build-arg CUDA=12 "
                          "docker/)", "run the CPU image (docker build --build-arg DEVICE=cpu "
                          "docker/)")


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
