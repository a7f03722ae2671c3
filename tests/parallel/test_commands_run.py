"""The commands run from anywhere, with the checkout's code, whether or not
the package is installed: each one's --help from /, under this machine's
bare python3 (no package, no framework), as they run in the image with the
checkout mounted or before any environment exists. The rules of their
shape are in tests/single/test_commands.py."""

import os
import shutil
import subprocess

import pytest
from conftest import REPO

BARE_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

SHELL_COMMANDS = ["scripts/build_image.sh", "scripts/emulate_cluster.sh", "scripts/launch.sh",
                  "scripts/launch_cluster.sh", "scripts/discover_hosts.sh",
                  "scripts/slurm/local_cluster.sh", "scripts/slurm/submit.sh",
                  "scripts/slurm/horovod.sbatch", "benchmarks/run_matrix.sh",
                  "benchmarks/gpu_check.sh",
                  "scripts/python.sh"]
# The measuring commands whose modules need the standard library only.
STDLIB_FILES = ["benchmarks/horovod_settings.py", "benchmarks/predict_scaling.py",
                "benchmarks/timeline_summary.py"]


@pytest.fixture(scope="module")
def bare_env() -> dict:
    if BARE_PYTHON is None:
        pytest.skip("no python3 in /usr/bin")
    found = subprocess.run([BARE_PYTHON, "-c", "import horovod_train"], cwd="/",
                           capture_output=True)
    if found.returncode == 0:
        pytest.skip(f"{BARE_PYTHON} has horovod_train installed")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "HVT_PYTHON": BARE_PYTHON}


@pytest.mark.parametrize("command", SHELL_COMMANDS)
def test_each_shell_command_runs_from_anywhere_without_the_package_installed(command, bare_env):
    result = subprocess.run(["bash", str(REPO / command), "--help"], cwd="/", env=bare_env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) > 3 and not result.stderr, result.stdout


@pytest.mark.parametrize("path", STDLIB_FILES)
def test_benchmark_files_run_by_path_without_the_package_installed(path, bare_env):
    """Without the venv, the checkout on PYTHONPATH is the documented way
    (docs/development.md): the lab's files do not rewrite sys.path."""
    result = subprocess.run([BARE_PYTHON, str(REPO / path), "--help"], cwd="/",
                            env={**bare_env, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage:"), result.stdout


def test_the_front_door_lists_its_commands_without_the_package_installed(bare_env):
    result = subprocess.run([BARE_PYTHON, "-m", "horovod_train", "--help"], cwd="/",
                            env={**bare_env, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "build-image" in result.stdout and not result.stderr
