"""The network the ranks share (horovod_train/launch/network.py): the rules
that choose an interface, this machine's interfaces as the kernel reports
them, and, on the emulated hosts with decoy interfaces (docker0 with one
address on both hosts, mgmt0 on a subnet per host, eth1 on a network that
joins neither), what horovodrun and the project's launch check do there.
srun's probe over the same hosts is tested with the real Slurm
(tests/test_slurm.py)."""

import json
import os
import subprocess

import pytest
from conftest import BIN, REPO, run_on

from horovod_train.launch import network
from horovod_train.launch.network import Interface

LAUNCH = REPO / "scripts" / "launch.sh"


def host(*interfaces: Interface) -> list[Interface]:
    return [Interface("lo", True, True, "127.0.0.1/8"), *interfaces]


def eth(name: str, address: str | None, up: bool = True) -> Interface:
    return Interface(name, up, False, address)


TWO_HOSTS = {
    "a": host(eth("eth0", "10.0.0.11/24"), eth("docker0", "172.17.0.1/16"),
              eth("mgmt0", "192.168.1.11/24"), eth("ib0", "10.9.0.11/16"),
              eth("eth2", "10.5.0.11/24", up=False), eth("veth9", None)),
    "b": host(eth("eth0", "10.0.0.12/24"), eth("docker0", "172.17.0.1/16"),
              eth("mgmt0", "192.168.2.12/24"), eth("eth2", "10.5.0.12/24"),
              eth("veth9", None)),
}


@pytest.mark.parametrize("name, why", [
    ("eth0", None),
    ("lo", "loopback"),
    ("docker0", "the same address 172.17.0.1 on a and b (a network local to each host, "
                "such as Docker's bridge)"),
    ("mgmt0", "on different subnets: a 192.168.1.11/24, b 192.168.2.12/24"),
    ("ib0", "missing on b"),
    ("eth2", "down on a"),
    ("veth9", "no IPv4 address on a, b"),
    ("nope", "missing on a, b"),
])
def test_each_interface_gets_its_verdict(name, why):
    assert network.problem(name, TWO_HOSTS) == why


def test_on_one_host_loopback_is_the_network():
    assert network.problem("lo", {"a": TWO_HOSTS["a"]}) is None


def test_verdicts_keep_the_first_hosts_order_and_say_why_not():
    third = {"c": host(eth("eth0", "10.0.0.13/24"), eth("docker0", "172.17.0.1/16"),
                       eth("ens5", "10.1.0.13/24"))}
    why = network.verdicts({**TWO_HOSTS, **third})
    # Names with an address somewhere; veth9 has none anywhere.
    assert list(why) == ["lo", "eth0", "docker0", "mgmt0", "ib0", "eth2", "ens5"]
    assert [name for name, reason in why.items() if reason is None] == ["eth0"]
    assert why["ens5"] == "missing on a, b"
    assert why["docker0"].startswith("the same address 172.17.0.1 on a and b and c")


def test_a_named_interface_is_checked_with_the_same_rules():
    network.check_named(["eth0"], TWO_HOSTS)
    with pytest.raises(ValueError, match="^network interface docker0 cannot carry the job: "
                                         "the same address 172.17.0.1 on a and b"):
        network.check_named(["eth0", "docker0"], TWO_HOSTS)


def test_this_machines_interfaces_are_what_iproute2_reports():
    """The kernel's ioctls against `ip -j addr`: every interface, its state
    and its first IPv4 address."""
    listed = json.loads(subprocess.run(["ip", "-j", "addr", "show"], capture_output=True,
                                       text=True, check=True).stdout)
    found = {iface.name: iface for iface in network.local_interfaces()}
    assert set(found) == {item["ifname"] for item in listed}
    for item in listed:
        iface = found[item["ifname"]]
        ipv4 = [a for a in item.get("addr_info", []) if a["family"] == "inet"]
        assert iface.address == (f"{ipv4[0]['local']}/{ipv4[0]['prefixlen']}" if ipv4 else None)
        assert iface.loopback == ("LOOPBACK" in item["flags"])
        assert iface.up == ("UP" in item["flags"] and "LOWER_UP" in item["flags"])
    assert found["lo"] == Interface("lo", True, True, "127.0.0.1/8")


def test_list_prints_the_interfaces_as_json_under_a_bare_python():
    result = subprocess.run(["python3", "-", "list"], input=network.SOURCE.read_text(),
                            capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr
    assert network.interfaces_from_json(json.loads(result.stdout)) == network.local_interfaces()


KNOWN = ["lo", "eth0", "docker0", "mgmt0", "ib0", "eth2", "veth9"]


@pytest.mark.parametrize("variable, value, selection", [
    ("HOROVOD_GLOO_IFACE", "ib0", (["ib0"], True)),
    ("OMPI_MCA_btl_tcp_if_include", "eth0,10.0.0.0/24", (["eth0"], True)),
    ("NCCL_SOCKET_IFNAME", "eth", (["eth0", "eth2"], False)),  # prefixes
    ("NCCL_SOCKET_IFNAME", "=eth0,ib0", (["eth0", "ib0"], False)),  # exact names
    ("NCCL_SOCKET_IFNAME", "^docker,lo", None),  # an exclusion list is not checked
])
def test_a_layers_own_variable_selects_as_that_layer_reads_it(variable, value, selection):
    assert network.layer_selection(variable, value, KNOWN) == selection


@pytest.mark.parametrize("variable, value, message", [
    ("NCCL_SOCKET_IFNAME", "eth", None),
    ("HOROVOD_GLOO_IFACE", "ib0", "HOROVOD_GLOO_IFACE=ib0: network interface ib0 cannot carry "
                                  "the job: missing on b"),
    ("OMPI_MCA_oob_tcp_if_include", "eth0,eth2", "OMPI_MCA_oob_tcp_if_include=eth0,eth2: "
                                                 "network interface eth2 cannot carry the job: "
                                                 "down on a"),
    ("NCCL_SOCKET_IFNAME", "mgmt", "NCCL_SOCKET_IFNAME=mgmt: no interface it selects can carry "
                                   "the job: mgmt0: on different subnets: a 192.168.1.11/24, "
                                   "b 192.168.2.12/24"),
    ("NCCL_SOCKET_IFNAME", "ens", "NCCL_SOCKET_IFNAME=ens: no interface it selects can carry "
                                  "the job: no node has one"),
])
def test_a_layers_own_variable_that_cannot_carry_the_job_is_one_line(variable, value, message):
    why = network.verdicts(TWO_HOSTS)
    names, every = network.layer_selection(variable, value, KNOWN)
    if message is None:
        network.check_layer(variable, value, names, every, why)
        return
    with pytest.raises(ValueError) as error:
        network.check_layer(variable, value, names, every, why)
    assert str(error.value) == message


# --- the emulated hosts with decoys -----------------------------------------------

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
    why = network.verdicts(tables)
    assert why["docker0"].startswith("the same address 172.17.0.1 on a and b")
    assert why["mgmt0"] == "on different subnets: a 192.168.201.11/24, b 192.168.202.12/24"
    # eth1 passes every rule that the hosts' tables can show: only connecting
    # tells that it joins neither (srun's probe: tests/test_slurm.py).
    assert [name for name, reason in why.items() if reason is None] == ["eth0", "eth1"]


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
