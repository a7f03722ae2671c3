"""The platform's lock: constraints.txt pins every Python package for torch's
CUDA 13; constraints-cuda12.txt holds the pins that make its CUDA 12
variant (torch's last CUDA 12 release and its CUDA libraries), which take
the place of the same names' pins and of CUDA 13's libraries. setup.sh
installs with `-c` the lock this prints; build_horovod.py reads versions
from it.

    lock.py [--cuda 13|12]

Standard library only: setup.sh runs it before anything is installed, and
the image's builder copies it with the lock (docker/Dockerfile).
"""

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "constraints.txt"
CUDA12_PINS = HERE / "constraints-cuda12.txt"
CUDA_MAJORS = (13, 12)  # the lock's, then its variant's
FRAMEWORK_PYTHONS_FILE = HERE / "framework-pythons.txt"


def framework_pythons(path: Path = FRAMEWORK_PYTHONS_FILE) -> dict[str, list[str]]:
    """framework-pythons.txt: each framework's Pythons, in its order."""
    table = {}
    for line in path.read_text().splitlines():
        words = line.split("#")[0].split()
        if words:
            table[words[0]] = words[1:]
    return table


def python_key(python: str) -> tuple[int, ...]:
    """A Python's release as numbers, to order and compare: "3.13" -> (3, 13)."""
    return tuple(int(part) for part in python.split("."))


FRAMEWORK_PYTHONS = framework_pythons()
# Every Python the lock serves, oldest first.
PYTHONS = sorted({p for ps in FRAMEWORK_PYTHONS.values() for p in ps}, key=python_key)


def pin_name(line: str) -> str | None:
    """A lock line's package, normalised ('PyYAML==6.0.3' -> 'pyyaml'), or
    None for a comment or blank line."""
    line = line.split("#")[0].strip()
    return re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() if "==" in line else None


def is_cuda_library(name: str) -> bool:
    """A CUDA release's own package: a library wheel, or the toolkit's."""
    return name.startswith("nvidia-") or name == "cuda-toolkit"


def lock_text(cuda_major: int = CUDA_MAJORS[0]) -> str:
    """The lock for torch's CUDA major: constraints.txt, and for CUDA 12 each
    of its pins that constraints-cuda12.txt names replaced there, its CUDA
    13 libraries left out, and the variant's others added at the end."""
    text = LOCK.read_text()
    if cuda_major == CUDA_MAJORS[0]:
        return text
    if cuda_major not in CUDA_MAJORS:
        raise ValueError(f"CUDA {cuda_major}: the lock has CUDA "
                         f"{' and '.join(map(str, CUDA_MAJORS))}")
    pins = {pin_name(line): line for line in CUDA12_PINS.read_text().splitlines()
            if pin_name(line)}
    lines = [pins.pop(pin_name(line)) if pin_name(line) in pins else line
             for line in text.splitlines()
             if pin_name(line) in pins or not is_cuda_library(pin_name(line) or "")]
    return "\n".join([*lines, f"# CUDA {cuda_major}, from {CUDA12_PINS.name}",
                      *pins.values()]) + "\n"


def locked_version(package: str, cuda_major: int = CUDA_MAJORS[0]) -> str:
    """The version the lock of torch's CUDA major pins for a package
    (KeyError if none)."""
    wanted = pin_name(f"{package}==")
    for line in lock_text(cuda_major).splitlines():
        if pin_name(line) == wanted and ";" not in line:
            return line.split("#")[0].split("==", 1)[1].strip()
    raise KeyError(package)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="lock.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", type=int, choices=CUDA_MAJORS, default=CUDA_MAJORS[0])
    sys.stdout.write(lock_text(parser.parse_args().cuda))
