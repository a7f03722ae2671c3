"""distributed.py: what every trainer does with Horovod, whatever the
framework (its collectives are exercised by every training test)."""

import os
import subprocess
import sys

import pytest
from conftest import BIN, REPO
from horovod.common.exceptions import HorovodInternalError

from horovod_train.core import distributed
from horovod_train.core.errors import RunFailed

# The text TensorFlow wraps Horovod's shutdown in (MXNet's is alike).
TF_ERROR = ("Graph execution error:\n\nDetected at node DistributedGradientTape_Allreduce\n"
            "Horovod has been shut down. This was caused by an exception on one of the ranks "
            "or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks "
            "finished execution.")


@pytest.mark.parametrize("error", [HorovodInternalError(TF_ERROR.split("\n")[-1]),
                                   RuntimeError(TF_ERROR)], ids=["pytorch", "tensorflow"])
def test_horovod_ending_the_job_is_one_line(error):
    with pytest.raises(RunFailed) as ended, distributed.one_line_when_horovod_stops():
        raise error
    assert str(ended.value) == ("Horovod stopped the job: Horovod has been shut down (another "
                                "rank ended or stopped answering)")


def test_a_horovod_error_of_another_kind_keeps_its_first_sentence():
    with pytest.raises(RunFailed, match=r"^Horovod stopped the job: Gloo timed out \(another"), \
            distributed.one_line_when_horovod_stops():
        raise HorovodInternalError("Gloo timed out. Details follow.\nmore")


def test_other_errors_pass_through():
    with pytest.raises(ValueError), distributed.one_line_when_horovod_stops():
        raise ValueError("a bug of ours: keep its traceback")


def test_gloos_source_location_is_left_out():
    # Gloo's errors start with a path of the machine that built Horovod.
    error = HorovodInternalError("[/build/horovod/third_party/gloo/gloo/transport/tcp/"
                                 "unbound_buffer.cc:81] Timed out waiting 30000ms for recv "
                                 "operation to complete")
    assert distributed.first_sentence(error) == ("Timed out waiting 30000ms for recv operation "
                                                 "to complete")


RANK_SETTINGS = """
import os, sys
import horovod.torch as hvd
from horovod_train.core import console, distributed
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
