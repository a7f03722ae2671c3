"""The PyTorch trainer, run for real under horovodrun: on this machine with
Gloo and MPI, across the emulated hosts a and b with the two-host command
(on hosts that differ as real ones do), and interrupted then resumed."""

import contextlib

import pytest
from conftest import assert_trained, horovodrun, interface_renamed

pytestmark = pytest.mark.slow

# One epoch of 8,000 digits on 4 ranks reaches the accuracy assert_trained asks for.
EPOCHS = ["--epochs", "1"]


@pytest.mark.cluster
@pytest.mark.parametrize("controller, hosts", [("mpi", "cluster"), ("gloo", "routed_cluster")],
                         ids=["mpi, b's eth0 called ens5", "gloo, a subnet per host"])
def test_two_host_command_across_emulated_hosts(controller, hosts, request, mnist_dir, tmp_path):
    """horovodrun -np 4 -H a:2,b:2 python horovod_train/pytorch_mnist.py,
    launched from host a as a user would, on hosts that differ: b's eth0
    called ens5 (no interface name common to both: the platform's network
    rule, which the project's Horovod asks, chooses the network by its
    subnet), or a and b on subnets of their own, joined by a router. No
    --disable-cache: the probe runs afresh at every launch, so the other
    layout's hosts a and b, probed before, do not mislead it."""
    layout = request.getfixturevalue(hosts)
    renamed = interface_renamed("b", "eth0", "ens5") if hosts == "cluster" else \
        contextlib.nullcontext()
    with renamed:
        run = horovodrun(["-np", "4", "-H", "a:2,b:2", f"--{controller}"],
                         ["--data-dir", str(mnist_dir), "--no-download", *EPOCHS],
                         tmp_path / "run", host="a")
    summary = assert_trained(run, 4, controller, {"a": 2, "b": 2})
    assert {r["host"] for r in summary["ranks"] if r["local_rank"] == 1} == {"a", "b"}
    assert summary["network_interface"] == "eth0"  # rank 0's, on a
    if hosts == "cluster":
        subnet = layout["hosts"]["a"].rsplit(".", 1)[0] + ".0/24"
        assert f"horovodrun: network {subnet} on a eth0, b ens5 (chosen)" in run.output
