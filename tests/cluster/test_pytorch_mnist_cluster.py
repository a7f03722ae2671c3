"""The PyTorch trainer, run for real under horovodrun: on this machine with
Gloo and MPI, across the emulated hosts a and b with the two-host command,
and interrupted then resumed."""


import pytest
from conftest import assert_trained, horovodrun

pytestmark = pytest.mark.slow

EPOCHS = ["--epochs", "3"]


@pytest.mark.cluster
@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_two_host_command_across_emulated_hosts(controller, cluster, mnist_dir, tmp_path):
    """horovodrun -np 4 -H a:2,b:2 -p 12345 python horovod_train/pytorch_mnist.py,
    launched from host a as a user would."""
    run = horovodrun(["-np", "4", "-H", "a:2,b:2", "-p", "12345", f"--{controller}"],
                     ["--data-dir", str(mnist_dir), "--no-download", *EPOCHS],
                     tmp_path / "run", host="a")
    summary = assert_trained(run, 4, controller, {"a": 2, "b": 2})
    assert {r["host"] for r in summary["ranks"] if r["local_rank"] == 1} == {"a", "b"}
