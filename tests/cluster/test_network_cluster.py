"""On the emulated hosts with decoy interfaces (docker0 with one address on
both hosts, mgmt0 on a subnet per host, eth1 on a network that joins
neither): the decoys' shapes, what horovodrun chooses among them and what
Open MPI gets, and an interface named for horovodrun that a host cannot
use, refused in one line (horovod_train/launch/network.py's rules are
test_network.py's)."""

import json
import os
import subprocess

import pytest
from conftest import BIN, REPO, run_on

from horovod_train.launch import network

LAUNCH = REPO / "scripts" / "launch.sh"


def launch_from_a(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """scripts/launch.sh ARGS on host a, from the checkout."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run([str(REPO / "scripts" / "emulate_cluster.sh"), "exec", "a", "--",
                           str(LAUNCH), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


# What each rank prints: the interface settings its launcher handed it.
SHOW_SETTINGS = ("import os, socket; from horovod_train.core.console import say; say(' '.join("
                 "[socket.gethostname()] + [f'{k}={os.environ.get(k)}' for k in ("
                 "'HOROVOD_GLOO_IFACE', 'NCCL_SOCKET_IFNAME', 'OMPI_MCA_btl_tcp_if_include', "
                 "'OMPI_MCA_oob_tcp_if_include')]))")


@pytest.mark.cluster
def test_decoy_hosts_have_the_shapes_that_mislead_jobs(decoy_cluster):
    tables = {}
    for name in ("a", "b"):
        result = run_on(name, "python3", str(network.SOURCE), "list")
        tables[name] = network.interfaces_from_json(json.loads(result.stdout))
    why = network.table_verdicts(tables)
    assert why["172.17.0.0/16 on docker0"].startswith("the same address 172.17.0.1 on a and b")
    # For horovodrun, which trusts a named interface, a network on different
    # subnets is refused too; srun's probe tries it by connecting.
    assert network.problem("mgmt0", tables) == ("on different subnets: a 192.168.201.11/24, "
                                                "b 192.168.202.12/24")
    # eth1 and mgmt0 pass every rule that the hosts' tables can show: only
    # connecting tells that they join neither (srun's probe:
    # tests/cluster/test_slurm.py).
    assert [title.rsplit(" ", 1)[-1] for title, reason in why.items() if reason is None] == [
        "eth0", "eth1", "mgmt0"]


@pytest.mark.cluster
@pytest.mark.parametrize("controller", ["--gloo", "--mpi"])
def test_horovodrun_chooses_eth0_among_the_decoys_and_mpi_gets_it_everywhere(
        decoy_cluster, controller):
    """horovodrun's own probe, and (MPI) the project's patch handing its
    choice to Open MPI's out-of-band channel too. Unpatched, the probe tried
    eth1's unanswered address ten times and outlasted --start-timeout
    (docker/env/patches/horovod-0.28.1-probe-unreachable-once.patch)."""
    # --disable-cache: horovodrun would reuse an earlier run's probe.
    result = launch_from_a("-np", "2", "-H", "a:1,b:1", "-p", "12345", "--disable-cache",
                           controller, str(BIN / "python"), "-c", SHOW_SETTINGS)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = sorted(line.split(">:", 1)[-1].strip() for line in result.stdout.splitlines()
                   if "HOROVOD_GLOO_IFACE" in line)
    assert len(lines) == 2, result.stdout
    for name, line in zip(("a", "b"), lines, strict=True):
        if controller == "--gloo":
            assert line == (f"{name} HOROVOD_GLOO_IFACE=eth0 NCCL_SOCKET_IFNAME=eth0 "
                            "OMPI_MCA_btl_tcp_if_include=None OMPI_MCA_oob_tcp_if_include=None")
        else:
            assert line == (f"{name} HOROVOD_GLOO_IFACE=None NCCL_SOCKET_IFNAME=eth0 "
                            "OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0")


@pytest.mark.cluster
@pytest.mark.parametrize("named, why", [
    ("docker0", "the same address 172.17.0.1 on a and b"),
    ("mgmt0", "on different subnets: a 192.168.201.11/24, b 192.168.202.12/24"),
    ("ib0", "missing on a, b"),
])
def test_an_interface_named_for_horovodrun_that_a_host_cannot_use_is_one_line(
        decoy_cluster, named, why):
    """horovodrun skips its probe for a named interface and would start the
    ranks on it; the launch check reads every host's interfaces first."""
    result = launch_from_a("-np", "4", "-H", "a:2,b:2", "-p", "12345", "--network-interface",
                           named, str(BIN / "python"), "-c", "print('started')")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"launch: error: network interface {named} cannot carry the job: {why}"
        + ("" if named != "docker0" else " (a network local to each host, such as Docker's "
                                         "bridge)")]
    assert "started" not in result.stdout
