"""The network the ranks share (horovod_train/launch/network.py): the rules
that choose networks from the nodes' interface tables (what the probe's
connections found given as a table too), the networks a user names, a
layer's own variable checked as that layer reads it, and each rank's own
interface names on the chosen networks (core/runtime.py). This machine's
interfaces are test_network_run.py's; what horovodrun and the launch check
do on hosts with decoy interfaces, test_network_cluster.py's; srun's probe
on real nodes, tests/cluster/test_slurm.py's."""


import ipaddress

import pytest
from conftest import REPO

from horovod_train.core import interfaces, runtime
from horovod_train.core.errors import UserError
from horovod_train.core.interfaces import Interface, local_interfaces, names_on, parse_networks
from horovod_train.launch import horovodrun, network, openmpi, pipeline
from horovod_train.launch.job import named_network
from horovod_train.launch.slurm import plan as slurm_plan


def host(*interfaces: Interface) -> list[Interface]:
    return [Interface("lo", True, True, "127.0.0.1/8"), *interfaces]


def eth(name: str, address: str | None, up: bool = True, ipv6: bool = False) -> Interface:
    return Interface(name, up, False, address, ipv6)


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
    ("mgmt0", None),  # on a subnet per host: only connecting tells (reachable is the rule)
    ("ib0", "missing on b"),
    ("eth2", "down on a"),
    ("veth9", "no IPv4 address on a, b"),
    ("nope", "missing on a, b"),
])
def test_each_interface_gets_its_verdict_from_the_tables(name, why):
    assert network.table_problem(network.by_name(name, TWO_HOSTS)) == why


def test_on_one_host_loopback_is_the_network():
    assert network.table_problem(network.by_name("lo", {"a": TWO_HOSTS["a"]})) is None


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



# What connecting found, for decide(): every address answers but those of
# the networks named, as on hosts with no route between them.
def reachable_except(*labels: str):
    def connect(addresses):
        return [(node, label, peer, f"{addresses[label][peer]}: Network is unreachable")
                for label in labels if label in addresses
                for node in addresses[label] for peer in addresses[label] if peer != node]
    return connect


def everything_answers(addresses):
    return []


def test_candidates_are_subnets_every_node_is_on_then_the_rest_by_name():
    assert network.table_verdicts(TWO_HOSTS) == {
        "127.0.0.0/8 on lo": "loopback",
        "10.0.0.0/24 on eth0": None,
        "172.17.0.0/16 on docker0": "the same address 172.17.0.1 on a and b (a network local "
                                    "to each host, such as Docker's bridge)",
        "10.5.0.0/24 on eth2": "down on a (eth2)",
        # Interfaces on a subnet not every node has: by name, for the connect test.
        "mgmt0": None,
        "ib0": "missing on b",
    }


def test_the_connect_test_decides_and_every_other_candidate_says_why_not():
    choice = network.decide(TWO_HOSTS, reachable_except("mgmt0"))
    assert [net.title for net in choice.networks] == ["10.0.0.0/24 on eth0"]
    assert choice.cidrs == ["10.0.0.0/24"] and not choice.named
    assert choice.rejected == {
        "127.0.0.0/8 on lo": "loopback",
        "172.17.0.0/16 on docker0": "the same address 172.17.0.1 on a and b (a network local "
                                    "to each host, such as Docker's bridge)",
        "10.5.0.0/24 on eth2": "down on a (eth2)",
        "mgmt0": "a cannot reach b: 192.168.2.12: Network is unreachable",
        "ib0": "missing on b",
    }


def only_from(reached: str, blocked: str):
    """Connecting where `blocked` lets no one in on any network, as a
    firewall that passes ssh alone does (its own connections out pass)."""
    def connect(addresses):
        return [(reached, label, blocked, f"no answer from {ips[blocked]} within 3 s")
                for label, ips in addresses.items()]
    return connect


def test_a_node_no_one_reaches_on_any_network_is_named_as_a_firewall():
    with pytest.raises(network.NoSharedInterface) as error:
        network.decide(TWO_HOSTS, only_from("a", "b"))
    message = str(error.value)
    assert message.startswith("no network connects every node: ")
    assert message.endswith("(a firewall on b? the probe runs there, over ssh or srun, yet no "
                            "other node reaches its ports on any network: let TCP and UDP from "
                            "the job's hosts in there, not ssh alone, or open a range of ports and "
                            "name it in HVT_PORTS)")


def test_networks_that_fail_between_both_nodes_are_not_called_a_firewall():
    with pytest.raises(network.NoSharedInterface) as error:
        network.decide(TWO_HOSTS, reachable_except("10.0.0.0/24", "mgmt0"))
    assert "firewall" not in str(error.value)


RENAMED = {"a": host(eth("eth0", "10.0.0.11/24")), "b": host(eth("ens5", "10.0.0.12/24"))}


def test_a_network_is_chosen_whatever_each_node_calls_its_interface():
    choice = network.decide(RENAMED, everything_answers)
    assert choice.title == "10.0.0.0/24 on a eth0, b ens5"
    assert choice.cidrs == ["10.0.0.0/24"]
    assert choice.rejected == {"127.0.0.0/8 on lo": "loopback"}  # not "eth0: missing on b"


def test_routed_hosts_share_an_interface_name_and_get_each_ones_subnet():
    routed = {"a": host(eth("eth0", "10.1.0.11/24")), "b": host(eth("eth0", "10.2.0.12/24"))}
    choice = network.decide(routed, everything_answers)
    assert choice.title == "eth0" and choice.cidrs == ["10.1.0.0/24", "10.2.0.0/24"]
    with pytest.raises(network.NoSharedInterface) as error:
        network.decide(routed, reachable_except("eth0"))
    assert str(error.value) == ("no network connects every node: 127.0.0.0/8 on lo: loopback; "
                                "eth0: a cannot reach b: 10.2.0.12: Network is unreachable")


def test_a_subnet_that_fails_to_connect_names_the_peers_interface():
    with pytest.raises(network.NoSharedInterface, match=r"; 10\.0\.0\.0/24 on a eth0, b ens5: "
                                                        r"a cannot reach b \(ens5\): 10\.0\.0\.12"):
        network.decide(RENAMED, reachable_except("10.0.0.0/24"))


def test_an_ipv6_only_interface_is_named_among_those_left_out():
    hosts = {name: host(eth("eth0", f"10.0.0.1{i}/24"), eth("ib0", None, ipv6=True),
                        eth("veth9", None))
             for i, name in enumerate("ab")}
    choice = network.decide(hosts, everything_answers)
    assert choice.rejected["ib0"] == "IPv6 only (the job uses IPv4) on a, b"
    assert "veth9" not in choice.rejected  # no address of either kind: nothing to say


TWO_NETWORKS = {name: host(eth("eth0", f"10.0.0.{i}/24"), eth("eth2", f"10.5.0.{i}/24"))
                for i, name in ((11, "a"), (12, "b"))}


def test_where_several_networks_join_every_node_the_fastest_alone_is_chosen():
    asked = []

    def measure(pairs):
        asked.append(pairs)
        return {"10.0.0.0/24": 2.4, "10.5.0.0/24": 910.0}

    choice = network.decide(TWO_NETWORKS, everything_answers, measure=measure)
    assert asked == [{"10.0.0.0/24": ("a", "b", "10.0.0.12"),
                      "10.5.0.0/24": ("a", "b", "10.5.0.12")}]
    assert choice.cidrs == ["10.5.0.0/24"] and choice.horovodrun_nics == "eth2"
    assert choice.rejected["10.0.0.0/24 on eth0"] == (
        "slower, 2.4 MB/s from a to b against 910.0 MB/s on 10.5.0.0/24")


def test_a_network_that_fails_its_measurement_is_left_out_with_what_failed():
    choice = network.decide(TWO_NETWORKS, everything_answers, measure=lambda pairs: {
        "10.0.0.0/24": 50.0, "10.5.0.0/24": "measuring 10.5.0.12: Connection reset by peer"})
    assert choice.cidrs == ["10.0.0.0/24"]
    assert choice.rejected["10.5.0.0/24 on eth2"] == (
        "measuring 10.5.0.12: Connection reset by peer")


def test_networks_the_user_names_are_all_kept_unmeasured():
    def measure(pairs):
        raise AssertionError("named networks are not measured")

    choice = network.decide(TWO_NETWORKS, everything_answers, ["eth0", "eth2"], measure=measure)
    assert choice.cidrs == ["10.0.0.0/24", "10.5.0.0/24"]
    assert choice.horovodrun_nics == "eth0,eth2"


def test_horovodrun_gets_names_where_every_host_has_them_else_networks():
    assert network.decide(RENAMED, everything_answers).horovodrun_nics == "10.0.0.0/24"
    routed = {"a": host(eth("eth0", "10.1.0.11/24")), "b": host(eth("eth0", "10.2.0.12/24"))}
    assert network.decide(routed, everything_answers).horovodrun_nics == "eth0"


@pytest.mark.parametrize("env, timeouts", [
    ({}, network.ProbeTimeouts(3.0, 120.0)),
    ({"HVT_PROBE_CONNECT_TIMEOUT_S": "0.5", "HVT_PROBE_TIMEOUT_S": "20"},
     network.ProbeTimeouts(0.5, 20.0)),
])
def test_the_probes_timeouts_are_settable(env, timeouts):
    assert network.ProbeTimeouts.from_env(env) == timeouts


@pytest.mark.parametrize("value", ["0", "-1", "soon", "1e9"])
def test_a_probe_timeout_that_is_no_time_is_one_error(value):
    with pytest.raises(ValueError, match=f"^HVT_PROBE_TIMEOUT_S={value}: want seconds"):
        network.ProbeTimeouts.from_env({"HVT_PROBE_TIMEOUT_S": value})


@pytest.mark.parametrize("named, title", [
    (["a:eth0", "b:ens5"], "a:eth0,b:ens5"),
    (["10.0.0.0/24"], "10.0.0.0/24 on a eth0, b ens5"),
])
def test_a_named_network_is_checked_by_connecting_and_kept(named, title):
    choice = network.decide(RENAMED, everything_answers, named)
    assert choice.named and choice.title == title and choice.cidrs == ["10.0.0.0/24"]


@pytest.mark.parametrize("named, connect, message", [
    (["eth0"], everything_answers, "network interface eth0 cannot carry the job: missing on b"),
    (["a:eth0", "b:ens5"], reachable_except("a:eth0,b:ens5"),
     "network interface a:eth0,b:ens5 cannot carry the job: a cannot reach b (ens5): "
     "10.0.0.12: Network is unreachable"),
    (["10.0.0.0/24"], reachable_except("10.0.0.0/24"),
     "network 10.0.0.0/24 cannot carry the job: a cannot reach b (ens5): 10.0.0.12: Network "
     "is unreachable"),
    (["10.9.0.0/16"], everything_answers, "network 10.9.0.0/16 cannot carry the job: missing "
                                          "on a, b"),
    (["a:eth0", "c:eth0"], everything_answers,
     "network interface a:eth0,c:eth0: c is not a node of the job (a, b)"),
    (["a:eth0"], everything_answers, "network interface a:eth0 names none for b"),
])
def test_a_named_network_that_cannot_carry_the_job_is_one_line(named, connect, message):
    with pytest.raises(ValueError) as error:
        network.decide(RENAMED, connect, named)
    assert str(error.value) == message


def test_a_named_network_down_on_one_node_names_that_node_and_its_interface():
    down = {"a": RENAMED["a"], "b": host(eth("ens5", "10.0.0.12/24", up=False))}
    with pytest.raises(ValueError, match=r"^network 10\.0\.0\.0/24 cannot carry the job: "
                                         r"down on b \(ens5\)$"):
        network.decide(down, everything_answers, ["10.0.0.0/24"])


@pytest.mark.parametrize("variable, value, message", [
    ("NCCL_SOCKET_IFNAME", "eth", None),
    ("HOROVOD_GLOO_IFACE", "ib0", "HOROVOD_GLOO_IFACE=ib0: network interface ib0 cannot carry "
                                  "the job: missing on b"),
    ("OMPI_MCA_oob_tcp_if_include", "eth0,eth2", "OMPI_MCA_oob_tcp_if_include=eth0,eth2: "
                                                 "network interface eth2 cannot carry the job: "
                                                 "down on a"),
    ("NCCL_SOCKET_IFNAME", "mgmt", "NCCL_SOCKET_IFNAME=mgmt: no interface it selects can carry "
                                   "the job: mgmt0: a cannot reach b: 192.168.2.12: Network is "
                                   "unreachable"),
    ("NCCL_SOCKET_IFNAME", "ens", "NCCL_SOCKET_IFNAME=ens: no interface it selects can carry "
                                  "the job: no node has one"),
])
def test_a_layers_own_variable_that_cannot_carry_the_job_is_one_line(variable, value, message):
    layers = {variable: value}
    if message is None:
        assert network.decide(TWO_HOSTS, reachable_except("mgmt0"), layers=layers).cidrs == [
            "10.0.0.0/24"]
        return
    with pytest.raises(ValueError) as error:
        network.decide(TWO_HOSTS, reachable_except("mgmt0"), layers=layers)
    assert str(error.value) == message


# --- HVT_NETWORK_INTERFACE as the job reads it ----------------------------------

@pytest.mark.parametrize("text, items", [
    ("eth0", ("eth0",)),
    ("ib0, eth0", ("ib0", "eth0")),
    ("a:eth0,b:ens5", ("a:eth0", "b:ens5")),
    ("10.213.0.0/24", ("10.213.0.0/24",)),
])
def test_network_interface_takes_names_per_host_names_and_networks(text, items):
    assert slurm_plan.make_settings(checkout=REPO, interfaces=text).network == items


@pytest.mark.parametrize("text", ["a:eth0,b:ens5", "10.213.0.0/24"])
def test_horovodrun_takes_what_srun_takes(text):
    """The project's Horovod takes networks in CIDR form (the probe hands it
    those where names differ per host)."""
    settings = slurm_plan.make_settings(launcher="horovodrun", checkout=REPO, interfaces=text)
    assert settings.network == tuple(text.split(","))


@pytest.mark.parametrize("text, message", [
    (":eth0", "HVT_NETWORK_INTERFACE=:eth0: ':eth0' is not an interface name, "
              "HOST:NAME or an IPv4 network in CIDR form (want e.g. eth0, a:eth0,b:ens5 "
              "or 10.0.0.0/24)"),
    ("10.213.0.11/24", "'10.213.0.11/24' is not an interface name"),
    ("a:b:c", "'a:b:c' is not an interface name"),
])
@pytest.mark.parametrize("launcher", ["srun", "horovodrun"])
def test_a_network_interface_the_job_cannot_read_is_one_error(launcher, text, message):
    with pytest.raises(UserError) as error:
        slurm_plan.make_settings(launcher=launcher, checkout=REPO, interfaces=text)
    assert message in str(error.value) and "\n" not in str(error.value)


# --- each rank's own names on the chosen networks -------------------------------

A_HOST = [Interface("lo", True, True, "127.0.0.1/8"), eth("eth0", "10.0.0.11/24"),
          eth("ib0", "10.9.0.11/16"), eth("eth1", "10.0.0.99/24")]


def test_a_rank_names_its_own_interfaces_on_the_networks_in_their_order():
    assert names_on(parse_networks("10.9.0.0/16,10.0.0.0/24"), A_HOST) == ["ib0", "eth0", "eth1"]
    assert runtime.chosen_network_settings("10.9.0.0/16,10.0.0.0/24", A_HOST, "a") == {
        "HOROVOD_GLOO_IFACE": "ib0", "NCCL_SOCKET_IFNAME": "=ib0,eth0,eth1"}
    renamed_b = [Interface("lo", True, True, "127.0.0.1/8"), eth("ens5", "10.0.0.12/24")]
    assert runtime.chosen_network_settings("10.0.0.0/24", renamed_b, "b") == {
        "HOROVOD_GLOO_IFACE": "ens5", "NCCL_SOCKET_IFNAME": "=ens5"}


@pytest.mark.parametrize("text, message", [
    ("192.168.0.0/16", "HVT_NETWORKS=192.168.0.0/16: no interface of a has an address on it"),
    ("eth0", "HVT_NETWORKS=eth0: 'eth0' is not an IPv4 network in CIDR form (e.g. 10.0.0.0/24)"),
])
def test_networks_a_rank_cannot_use_are_one_error(text, message):
    with pytest.raises(UserError) as error:
        runtime.chosen_network_settings(text, A_HOST, "a")
    assert str(error.value) == message


def test_a_rank_reports_open_mpis_networks_as_its_own_interface_names():
    assert runtime.interface_names("10.0.0.0/24", A_HOST) == "eth0,eth1"
    assert runtime.interface_names("eth0,ib0", A_HOST) == "eth0,ib0"
    assert runtime.interface_names(None, A_HOST) is None


# --- what scripts/launch.sh hands horovodrun --------------------------------------

COMMAND = ["python", "train.py"]


@pytest.mark.parametrize("argv, env, named", [
    (["-np", "2", *COMMAND], {}, None),
    (["--network-interface", "eth0", *COMMAND], {}, ["eth0"]),
    (["--network-interfaces=a:eth0,b:ens5", *COMMAND], {}, ["a:eth0", "b:ens5"]),
    ([*COMMAND], {"HVT_NETWORK_INTERFACE": "10.0.0.0/24"}, ["10.0.0.0/24"]),
    (["--network-interface", "eth0", *COMMAND], {"HVT_NETWORK_INTERFACE": "eth0"}, ["eth0"]),
    # The command's own options are the command's.
    (["python", "train.py", "--network-interface", "x"], {}, None),
])
def test_the_flag_and_the_variable_name_a_network_the_same_way(argv, env, named):
    assert launch_sh_network(argv, env) == tuple(named or ())


def launch_sh_network(argv: list[str], env: dict) -> tuple[str, ...]:
    """The network launch.sh reads from its arguments and environment."""
    argv = argv if "-np" in argv else ["-np", "1", *argv]
    args = horovodrun.parse_horovodrun_args(argv)
    flag = [value for _, _, value in pipeline.nic_options(horovodrun.options_of(argv,
                                                                               args.command))]
    return named_network(",".join(flag) if flag else None, env)


@pytest.mark.parametrize("argv, env, message", [
    (["--network-interface", "a:", *COMMAND], {},
     "--network-interface=a:: 'a:' is not an interface name, HOST:NAME or an IPv4 network"),
    ([*COMMAND], {"HVT_NETWORK_INTERFACE": "10.0.0.1/24"},
     "HVT_NETWORK_INTERFACE=10.0.0.1/24: '10.0.0.1/24' is not an interface name"),
])
def test_a_network_launch_sh_cannot_read_is_one_error(argv, env, message):
    with pytest.raises(UserError) as error:
        launch_sh_network(argv, env)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_flag_and_a_variable_that_disagree_are_one_error():
    with pytest.raises(UserError, match="^--network-interface eth0 and HVT_NETWORK_INTERFACE="
                                        "ens5 disagree: give one$"):
        launch_sh_network(["--network-interface", "eth0", *COMMAND],
                          {"HVT_NETWORK_INTERFACE": "ens5"})


@pytest.mark.parametrize("argv", [
    ["-np", "2", "--network-interface", "eth0", "-H", "a:1,b:1", *COMMAND],
    ["-np", "2", "--network-interfaces=eth0", "-H", "a:1,b:1", *COMMAND],
    ["-np", "2", "-H", "a:1,b:1", *COMMAND],
])
def test_horovodrun_gets_the_probes_choice_in_place_of_the_users_names(argv):
    choice = network.decide(RENAMED, everything_answers)
    assert pipeline.with_nics(argv[:-len(COMMAND)], choice) == [
        "--network-interfaces", "10.0.0.0/24", "-np", "2", "-H", "a:1,b:1"]


# --- what srun's ranks get --------------------------------------------------------

def test_srun_ranks_get_horovodruns_open_mpi_settings_where_nothing_set_them(tmp_path):
    site = tmp_path / "site.conf"
    site.write_text("# the site's\nbtl = ^openib\nbtl_tcp_if_exclude = lo,docker0\n")
    choice = network.decide(RENAMED, everything_answers)
    env = {"OMPI_MCA_mca_param_files": str(site), "OMPI_MCA_pml": "ucx"}
    ranks = openmpi.srun_rank_environment(env, choice.cidrs)
    assert ranks["HVT_NETWORKS"] == "10.0.0.0/24"
    assert ranks["OMPI_MCA_oob_tcp_if_include"] == "10.0.0.0/24"
    assert ranks["OMPI_MCA_oob_tcp_keepalive_time"] == "10"  # the project's file
    # The site's btl, its exclude list (Open MPI refuses include beside it)
    # and the user's pml stand.
    assert not {"OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_pml"} & set(ranks)
    bare = openmpi.srun_rank_environment({"OMPI_MCA_mca_param_files": str(tmp_path / "x")},
                                        choice.cidrs)
    assert bare["OMPI_MCA_btl"] == "^openib,ofi" and bare["OMPI_MCA_pml"] == "ob1"
    assert bare["OMPI_MCA_btl_tcp_if_include"] == "10.0.0.0/24"


@pytest.mark.parametrize("starter, env, pmix, barrier", [
    ("srun", {"HVT_PORTS": "50000-50200"}, "false", "10.0.0.11:50200"),
    ("srun", {"HVT_PORTS": "50000-50200", "SLURM_PMIX_DIRECT_CONN": "true"}, None, None),
    ("srun", {}, None, None),
    ("horovodrun", {"HVT_PORTS": "50000-50200"}, None, None),
], ids=["srun in a range", "the user's own", "no range", "horovodrun"])
def test_slurms_pmix_leaves_ports_of_its_own_inside_a_range(tmp_path, starter, env, pmix,
                                                            barrier):
    """Through slurmd, Slurm's PMIx gives MPI_Init no barrier across nodes:
    the ranks get the start barrier's place, the range's last port on the
    first node."""
    env = {"OMPI_MCA_mca_param_files": str(tmp_path / "x"), **env}
    ranks = pipeline.rank_environment(starter, network.decide(RENAMED, everything_answers), env)
    assert ranks.get("SLURM_PMIX_DIRECT_CONN") == pmix
    assert ("OMPI_MCA_btl_tcp_port_min_v4" in ranks) == ("HVT_PORTS" in env)
    assert ranks.get("HVT_START_BARRIER") == barrier
    # A new secret for each job, where there is a barrier.
    again = pipeline.rank_environment(starter, network.decide(RENAMED, everything_answers), env)
    assert ("HVT_START_BARRIER_TOKEN" in ranks) == (barrier is not None)
    if barrier:
        assert len(ranks["HVT_START_BARRIER_TOKEN"]) == 32
        assert ranks["HVT_START_BARRIER_TOKEN"] != again["HVT_START_BARRIER_TOKEN"]
    one_node = pipeline.rank_environment(starter, None, env)
    assert "HVT_START_BARRIER" not in one_node


# --- the project's Horovod, where names differ per host -------------------------

def test_horovods_networks_become_this_hosts_names_before_it_starts():
    networks = pytest.importorskip("horovod.common.networks")
    here = [iface for iface in local_interfaces() if iface.address and not iface.loopback]
    if not here:
        pytest.skip("no IPv4 interface besides loopback here")
    cidr = str(here[0].network)
    env = {"HOROVOD_GLOO_IFACE": cidr, "NCCL_SOCKET_IFNAME": f"{cidr},127.0.0.0/8",
           "OTHER": "10.0.0.0/8"}
    networks.resolve_environment(env)
    assert env == {"HOROVOD_GLOO_IFACE": here[0].name,
                   "NCCL_SOCKET_IFNAME": f"={here[0].name},lo", "OTHER": "10.0.0.0/8"}
    names = {"HOROVOD_GLOO_IFACE": "eth0"}
    networks.resolve_environment(names)
    assert names == {"HOROVOD_GLOO_IFACE": "eth0"}  # names stay as given
    taken = {iface.network for iface in local_interfaces() if iface.address}
    elsewhere = next(f"10.{i}.0.0/16" for i in range(256)
                     if not any(net.overlaps(ipaddress.IPv4Network(f"10.{i}.0.0/16"))
                                for net in taken))
    with pytest.raises(ValueError, match=f"^HOROVOD_GLOO_IFACE={elsewhere}: no interface of "):
        networks.resolve_environment({"HOROVOD_GLOO_IFACE": elsewhere})


# --- a second address on an interface the ranks use ---------------------------------

def test_a_second_address_on_the_jobs_interface_is_named_for_open_mpi():
    b = Interface("eth0", True, False, "10.0.0.12/24", others=("10.99.0.12/24",))
    choice = network.decide({"a": host(eth("eth0", "10.0.0.11/24")), "b": host(b)},
                            everything_answers)
    assert network.second_address_problem(choice) == (
        "host b's eth0 carries 10.99.0.12/24 beside 10.0.0.12/24, the job's address there: "
        "Open MPI announces one address per interface and drops its peers' connections from the "
        "other (the ranks would hang at start): remove the other address (ip addr del "
        "10.99.0.12/24 dev eth0) or give it an interface of its own, or start the ranks over "
        "Gloo (--gloo)")
    assert network.second_address_problem(network.decide(RENAMED, everything_answers)) is None


@pytest.mark.parametrize("argv, env, controller", [
    (["horovodrun", "-np", "4", "-H", "a:2,b:2", "python", "train.py"], {}, None),
    (["horovodrun", "-np", "4", "--gloo", "python", "train.py"], {}, "gloo"),
    (["horovodrun", "-np", "4", "--mpi", "python", "train.py"], {}, "mpi"),
    (["horovodrun", "-np", "4", "--min-np", "2", "--host-discovery-script", "d.sh", "python",
      "train.py"], {}, "gloo"),  # elastic: Gloo alone
    (["train.py", "--num-proc", "2"], {"HOROVOD_CONTROLLER": "gloo"}, "gloo"),
])
def test_the_literal_commands_controller_is_read_from_its_command_line(argv, env, controller):
    assert pipeline.literal_controller(argv, env) == controller


@pytest.mark.parametrize("text, ports", [(None, None), ("", None), ("50000-50200", (50000, 50200))])
def test_a_port_range_is_low_dash_high(text, ports):
    assert interfaces.port_range(text) == ports


@pytest.mark.parametrize("text", ["50000", "50200-50000", "80-90", "50000-70000", "a-b", "5-5"])
def test_a_port_range_that_is_none_is_one_error(text):
    with pytest.raises(ValueError, match=f"^HVT_PORTS={text}: want a range of ports LOW-HIGH"):
        interfaces.port_range(text)


def test_open_mpi_gets_a_few_ports_for_its_daemons_and_the_rest_for_its_ranks():
    assert openmpi.port_range_environment(50000, 50200) == {
        "OMPI_MCA_oob_tcp_dynamic_ipv4_ports": "50000-50003",
        "OMPI_MCA_btl_tcp_port_min_v4": "50004", "OMPI_MCA_btl_tcp_port_range_v4": "196"}
