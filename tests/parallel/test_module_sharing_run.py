"""tests/module_sharing.py, as scripts/test.sh uses it: two pytest runs of
one suite at once, given the same directory, run each shared test exactly
once between them, a module each at a time; the run that shares from the
back runs its own tests (marked cluster) first, then takes the modules
from the last one on."""

import os
import re
import subprocess
import sys

from conftest import REPO

MODULES = [f"test_m{i}.py" for i in range(6)]
SHARED_TEST = """\
import time

def test_one():
    time.sleep(0.1)

def test_two():
    time.sleep(0.1)
"""
OWN_TEST = """\
import pytest

@pytest.mark.cluster
def test_on_the_hosts():
    pass
"""


ENV = {**os.environ, "PYTHONPATH": str(REPO / "tests")}  # where module_sharing.py is


def pytest_of(suite, *args: str) -> list[str]:
    """pytest on the generated suite, with the plugin loaded from tests/."""
    return [sys.executable, "-m", "pytest", "-p", "module_sharing", "-p", "no:cacheprovider",
            "-c", str(suite / "pytest.ini"), "--rootdir", str(suite), *args, str(suite)]


def run(suite, *args: str) -> subprocess.Popen:
    return subprocess.Popen(pytest_of(suite, "-v", "--share-modules", str(suite / "claims"), *args),
                            cwd=suite, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def passed(process: subprocess.Popen) -> list[str]:
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    return re.findall(r"^(\S+::\S+) PASSED", output, re.M)


def test_two_runs_share_the_modules_and_each_test_runs_once(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cluster: not shared\n")
    for name in MODULES:
        (tmp_path / name).write_text(SHARED_TEST)
    (tmp_path / "test_hosts.py").write_text(OWN_TEST)
    front = run(tmp_path, "-m", "not cluster")
    back = run(tmp_path, "--share-from", "back")
    front_ran, back_ran = passed(front), passed(back)

    every = [f"{name}::test_{n}" for name in MODULES for n in ("one", "two")]
    shared = [nodeid for nodeid in front_ran + back_ran if nodeid.startswith("test_m")]
    assert sorted(shared) == sorted(every)  # each once, none lost
    # A module's tests stay together, in one run and in their order.
    for ran in (front_ran, back_ran):
        modules = [nodeid.split("::")[0] for nodeid in ran if "test_m" in nodeid]
        assert modules == sorted(modules, reverse=ran is back_ran), ran
        for name in set(modules):
            assert [n for n in ran if n.startswith(name)] == [f"{name}::test_one",
                                                               f"{name}::test_two"]
    # The test on the hosts, then the last module first.
    assert back_ran[0] == "test_hosts.py::test_on_the_hosts", back_ran
    assert back_ran[1:] == [] or back_ran[1].startswith("test_m5.py"), back_ran
    assert "test_m0.py::test_one" in front_ran  # the front run's first module


def test_without_a_directory_every_test_collected_runs(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cluster: not shared\n")
    (tmp_path / "test_m0.py").write_text(SHARED_TEST)
    (tmp_path / "test_hosts.py").write_text(OWN_TEST)
    result = subprocess.run(pytest_of(tmp_path, "-q"), cwd=tmp_path, env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "3 passed" in result.stdout, result.stdout
