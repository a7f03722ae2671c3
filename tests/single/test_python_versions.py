"""Which Python takes which framework: framework-pythons.txt, setup.sh's
rule from it (3.11 for every framework, 3.12 and 3.13 for PyTorch and
TensorFlow, refused in one line otherwise), the lock's python_version
markers, the README's table and pyproject.toml's requires-python saying the
same. The real setup on Python 3.13 is tests/distro's."""

import re
import subprocess
import tomllib

import pytest
from conftest import REPO
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

SETUP = REPO / "docker" / "env" / "setup.sh"
LOCK = REPO / "docker" / "env" / "constraints.txt"
CORE = REPO / "docker" / "env" / "requirements" / "core.txt"


def fake_python(tmp_path, version: str) -> str:
    """An interpreter that answers setup.sh's version question only."""
    python = tmp_path / f"python{version}"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    return str(python)


def setup_check(tmp_path, version: str, frameworks: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SETUP), "--venv", str(tmp_path / "venv"), "--frameworks", frameworks,
         "--gpu-ops", "none", "--check-options"],
        env={"PATH": "/usr/bin:/bin", "HVT_PYTHON": fake_python(tmp_path, version)},
        capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("version, frameworks", [
    ("3.11", "pytorch,tensorflow,mxnet"), ("3.12", "pytorch,tensorflow"),
    ("3.13", "pytorch,tensorflow")])
def test_setup_takes(tmp_path, version, frameworks):
    result = setup_check(tmp_path, version, frameworks)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"setup.sh: would set up {frameworks}, ")
    assert result.stderr == ""


@pytest.mark.parametrize("version, frameworks, message", [
    ("3.13", "pytorch,mxnet", "mxnet needs Python 3.11; {python} is 3.13: set HVT_PYTHON to "
                              "a Python it takes, or leave mxnet out"),
    ("3.12", "mxnet", "mxnet needs Python 3.11"),
    ("3.10", "pytorch", "Python 3.11, 3.12, 3.13 needed; {python} is 3.10"),
    ("3.14", "pytorch", "Python 3.11, 3.12, 3.13 needed"),
])
def test_setup_refuses_in_one_line(tmp_path, version, frameworks, message):
    result = setup_check(tmp_path, version, frameworks)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    expected = message.format(python=tmp_path / f"python{version}")
    assert result.stderr.startswith(f"setup.sh: error: {expected}"), result.stderr
    assert not (tmp_path / "venv").exists()


def pins(text: str, version: str) -> dict[str, str]:
    """name -> specifier of the lines whose marker holds on Python `version`."""
    chosen = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement = Requirement(line)
        if requirement.marker and not requirement.marker.evaluate(
                {"python_version": version, "python_full_version": f"{version}.0"}):
            continue
        assert requirement.name not in chosen, f"{requirement.name} twice on {version}"
        chosen[requirement.name] = str(requirement.specifier)
    return chosen


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_lock_pins_one_numpy_per_python(version):
    lock = pins(LOCK.read_text(), version)
    numpy = lock["numpy"]
    # MXNet's numpy (< 2) on 3.11, where it is set up; numpy 2 after.
    assert numpy.startswith("==1.26." if version == "3.11" else "==2.")
    # requirements/core.txt's range holds the lock's numpy on each Python.
    core = pins(CORE.read_text(), version)
    assert numpy.removeprefix("==") in SpecifierSet(core["numpy"])
    # The lock's pins are exact, one per package.
    assert all(re.fullmatch(r"==[\w.+]+", spec) for spec in lock.values())


def test_markers_name_python_versions_only():
    for line in LOCK.read_text().splitlines() + CORE.read_text().splitlines():
        if ";" in line and not line.startswith("#"):
            marker = Marker(line.split(";", 1)[1])
            assert re.fullmatch(r'python_version [<>=]+ "3\.\d+"', str(marker)), line


def test_pyproject_requires_what_setup_takes():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    supported = SpecifierSet(project["requires-python"])
    assert [v for v in ("3.10", "3.11", "3.12", "3.13", "3.14") if v in supported] == \
        ["3.11", "3.12", "3.13"]


def test_the_readme_table_is_the_lock_and_framework_pythons():
    """README's "Before you start" table: each Python's row names the
    lock's version of each framework it takes, "none" for the others."""
    import sys
    sys.path.insert(0, str(REPO / "docker" / "env"))
    import lock
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^  \| (3\.1\d[^|]*)\| ([^|]+)\| ([^|]+)\| ([^|]+)\|$", readme, re.M)
    assert rows, "no Python table in README.md"
    columns = {"pytorch": "torch", "tensorflow": "tensorflow-cpu", "mxnet": "mxnet"}
    seen = set()
    for pythons_cell, *cells in rows:
        pythons = re.findall(r"3\.\d+", pythons_cell)
        seen.update(pythons)
        for (framework, package), cell in zip(columns.items(), cells, strict=True):
            for python in pythons:
                if python in lock.FRAMEWORK_PYTHONS[framework]:
                    assert cell.strip().startswith(lock.locked_version(package)), (python, cell)
                else:
                    assert cell.strip() == "none", (python, cell)
        if "Keras" in cells[1]:
            assert f"Keras {lock.locked_version('keras')}" in cells[1]
    assert sorted(seen) == lock.PYTHONS
