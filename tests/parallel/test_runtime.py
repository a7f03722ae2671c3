"""runtime.py: what each rank sets in its own environment before Horovod
starts, checked in a rank that a real horovodrun started."""

import os
import subprocess
import sys

import pytest
from conftest import BIN, REPO

RANK_SETTINGS = """
import os, sys
import horovod.torch as hvd
from horovod_train.core import console, runtime
runtime.init_horovod(hvd, cpu_tensors=sys.argv[1] == "cpu")
# console.say: one write a line, so horovodrun's tag never lands inside one.
console.say(f"yield_when_idle {os.environ['OMPI_MCA_mpi_yield_when_idle']} {hvd.mpi_enabled()}")
console.say(f"fusion_threshold {os.environ.get('HOROVOD_FUSION_THRESHOLD', 'unset')}")
"""


def rank_settings(horovodrun_args: list[str], tensors: str, env: dict) -> str:
    """What one rank started by a real horovodrun reports of its settings."""
    result = subprocess.run([str(BIN / "horovodrun"), "-np", "1", "-H", "localhost:1",
                             *horovodrun_args, sys.executable, "-c", RANK_SETTINGS, tensors],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize("users_value, expected", [(None, "1"), ("0", "0")],
                         ids=["default", "users-value"])
def test_each_rank_starts_mpi_yielding_its_core_unless_the_user_said_otherwise(users_value,
                                                                               expected):
    """Open MPI spins while it waits; each rank asks it to yield, before
    hvd.init() starts MPI (benchmarks/horovod_settings.py measures why)."""
    env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_mpi_yield_when_idle"}
    if users_value is not None:
        env["OMPI_MCA_mpi_yield_when_idle"] = users_value
    assert f"yield_when_idle {expected} True" in rank_settings(["--mpi"], "cpu", env)


@pytest.mark.parametrize("tensors, horovodrun_args, expected", [
    ("cpu", [], "4194304"),
    ("cpu", ["--fusion-threshold-mb", "8"], "8388608"),
    ("gpu", [], "unset"),
], ids=["cpu-tensors", "users-value", "gpu-tensors"])
def test_ranks_with_cpu_tensors_fuse_at_most_4_mb_unless_the_user_said_otherwise(
        tensors, horovodrun_args, expected):
    """With CPU tensors the fusion buffer's copies are CPU work while the
    link idles; large gradients go alone instead (docs/benchmarks.md)."""
    env = {k: v for k, v in os.environ.items() if k != "HOROVOD_FUSION_THRESHOLD"}
    assert f"fusion_threshold {expected}" in rank_settings(["--gloo", *horovodrun_args],
                                                           tensors, env)
