"""The project's own environment variables have one prefix (HVT_), and an
old name, where set, is one line naming the new one (env_names)."""

import re
import subprocess
import sys

import pytest
from conftest import REPO

from horovod_train.core import env_names

# Names of other programs the code reads: the tools' own and the platform's.
FOREIGN_PREFIXES = ("HOROVOD_", "OMPI_", "NCCL_", "SLURM_", "SLURMD_")
FOREIGN = {"CUDA_HOME", "CXX", "HOME", "PATH", "PYTHONPATH", "XDG_CACHE_HOME",
           "LD_LIBRARY_PATH", "LD_PRELOAD", "GLIBC_TUNABLES", "OMP_NUM_THREADS",
           "TF_CPP_MIN_LOG_LEVEL",
           "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}  # torchrun's, in the DDP baseline

PYTHON_READ = re.compile(
    r'\b(?:environ|env)(?:\.get|\.setdefault|\.pop)?\(\s*"([A-Z][A-Z0-9_]*)"'
    r'|\b(?:environ|env)\[\s*"([A-Z][A-Z0-9_]*)"\]'
    r'|"([A-Z][A-Z0-9_]*)" (?:not )?in (?:os\.)?environ\b'
    r'|_ENV = "([A-Z][A-Z0-9_]*)"')
SHELL_READ = re.compile(r'\$\{([A-Z][A-Z0-9_]*)(?::?[-=+?][^}]*)?\}')


def names_read() -> dict[str, set[str]]:
    """Every environment variable the code reads, and where. Dockerfiles
    are left out: their ${...} are build arguments (--build-arg)."""
    files = subprocess.run(["git", "ls-files", "horovod_train", "scripts", "benchmarks",
                            "docker"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    found: dict[str, set[str]] = {}
    for name in files:
        if name.startswith("benchmarks/results/") or "Dockerfile" in name or \
                name.endswith(".patch"):
            continue
        text = (REPO / name).read_text(errors="replace")
        if name.endswith(".py"):
            pattern = PYTHON_READ
        elif name.endswith((".sh", ".sbatch", ".yaml")):
            pattern = SHELL_READ
        else:
            continue
        for match in pattern.finditer(text):
            found.setdefault(next(g for g in match.groups() if g), set()).add(name)
    return found


def test_the_projects_own_variables_have_its_prefix():
    read = names_read()
    assert {"HVT_MALLOC", "HVT_PYTHON", "HVT_SSH_PORT", "HVT_RESUME"} <= read.keys()
    strays = {name: sorted(where) for name, where in read.items()
              if not name.startswith(env_names.PREFIX) and name not in FOREIGN
              and not name.startswith(FOREIGN_PREFIXES)}
    assert strays == {}
    # No old name is read: the notes below are where they appear.
    old = {name: sorted(where) for name, where in read.items() if name in env_names.RENAMED}
    assert old == {}


def test_each_old_name_set_is_one_line_naming_the_new_one():
    notes = env_names.old_name_notes({"RESUME": "1", "HOROVOD_TRAIN_MALLOC": "glibc",
                                      "HVT_MALLOC": "glibc"})
    assert sorted(notes) == [
        "note: HOROVOD_TRAIN_MALLOC is now HVT_MALLOC; HOROVOD_TRAIN_MALLOC is not read",
        "note: RESUME is now HVT_RESUME; RESUME is not read"]
    # Each rank of a job would say it again: rank 0 says it for all.
    assert env_names.old_name_notes({"RESUME": "1", "HOROVOD_RANK": "3"}) == []
    assert len(env_names.old_name_notes({"RESUME": "1", "OMPI_COMM_WORLD_RANK": "0"})) == 1


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "horovod_train.mnist", "check", "--data-dir", "/nonexistent"],
    [sys.executable, str(REPO / "docker" / "env" / "build_horovod.py"), "--frameworks", "x"],
], ids=["a program of the package", "the environment recipe"])
def test_a_program_says_so_before_anything_else(command):
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "HOROVOD_WHEEL_CACHE": "/tmp/x"})
    first = result.stderr.splitlines()[0]
    assert first.endswith("note: HOROVOD_WHEEL_CACHE is now HVT_WHEEL_CACHE; "
                          "HOROVOD_WHEEL_CACHE is not read"), result.stderr


def test_the_recipe_and_the_entrypoint_name_them_as_the_package_does():
    """docker/env and the entrypoint stand alone (no import of the package):
    their old names are entries of env_names.RENAMED."""
    recipe = re.search(r"^RENAMED = (\{.*?\})$", (REPO / "docker" / "env" /
                                                  "build_horovod.py").read_text(), re.M)
    for old, new in eval(recipe[1]).items():  # noqa: S307 - a literal of our own file
        assert env_names.RENAMED[old] == new
    loop = re.search(r"for renamed in (.*); do", (REPO / "docker" / "entrypoint.sh").read_text())
    for pair in loop[1].split():
        old, new = pair.split("=")
        assert env_names.RENAMED[old] == new


def test_the_docs_table_is_the_code_s():
    text = (REPO / "docs" / "development.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z0-9_]+)` \| `(HVT_[A-Z0-9_]+)` \|$", text, re.M))
    assert rows == env_names.RENAMED
