"""The network the ranks share (horovod_train/launch/network.py): the rules
that choose an interface, and a layer's own variable checked as that layer
reads it. This machine's interfaces are test_network_run.py's; what
horovodrun and the launch check do on hosts with decoy interfaces,
test_network_cluster.py's; srun's probe, tests/cluster/test_slurm.py's."""


import pytest

from horovod_train.launch import network
from horovod_train.launch.network import Interface


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
