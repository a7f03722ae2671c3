"""Hosts: one model (Host), one -H parser and one hostfile reader for every
tool. Hostfiles follow OpenMPI's conventions; the repository's own stay in
the plain form horovodrun reads as well."""

import pytest
from conftest import REPO
from horovod.runner.common.util import hosts as horovod_hosts

from horovod_train.core.errors import UserError
from horovod_train.launch import hosts
from horovod_train.launch.hosts import Host

LAYOUTS = {"1x1": {"a": 1}, "1x2": {"a": 2}, "2x1": {"a": 1, "b": 1}, "2x2": {"a": 2, "b": 2},
           "2x4": {"a": 4, "b": 4}}


@pytest.mark.parametrize("name, expected", LAYOUTS.items())
def test_hostfile_matches_its_layout_read_by_ours_and_by_horovods_parser(name, expected):
    path = REPO / "hostfiles" / name
    assert {h.name: h.slots for h in hosts.read_hostfile(path)} == expected
    parsed = horovod_hosts.parse_hosts(horovod_hosts.parse_host_files(str(path)))
    assert {h.hostname: h.slots for h in parsed} == expected


def hostfile(tmp_path, text: str):
    path = tmp_path / "hostfile"
    path.write_text(text)
    return path


def test_openmpi_conventions_comments_blank_lines_and_a_bare_host(tmp_path):
    path = hostfile(tmp_path, "# the cluster\n"
                              "\n"
                              "a                 # a host alone: one slot\n"
                              "b slots=2\n"
                              "   \n"
                              "node-3.example slots = 4   # spaces around = as OpenMPI\n"
                              "10.0.0.4 slots=2 max_slots=8\n"
                              "e max_slots=3\n")
    assert hosts.read_hostfile(path) == [Host("a", 1), Host("b", 2), Host("node-3.example", 4),
                                         Host("10.0.0.4", 2), Host("e", 3)]


@pytest.mark.parametrize("text, message", [
    ("a slots=1\nb slot=2\n", ":2: cannot read 'b slot=2': want HOST, HOST slots=N or "
                              "HOST slots=N max_slots=M, # starting a comment"),
    ("a:2\n", ":1: cannot read 'a:2': want HOST"),
    ("a slots=two\n", ":1: cannot read 'a slots=two'"),
    ("a slots=1 slots=2\n", ":1: cannot read 'a slots=1 slots=2'"),
    ("# none yet\n\na slots=0\n", ":3: host a has 0 slots; each host needs at least 1"),
    ("a slots=-1\n", ":1: host a has -1 slots; each host needs at least 1"),
    ("a slots=4 max_slots=2\n", ":1: host a has max_slots=2, less than its slots=4"),
    ("a\nb slots=2\na slots=2\n", ":3: host a is listed again (first on line 1)"),
    ("a\n-v slots=1\n", ":2: host name '-v' begins with '-': ssh would read it as an option"),
])
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path, text, message):
    path = hostfile(tmp_path, text)
    with pytest.raises(UserError) as raised:
        hosts.read_hostfile(path)
    assert str(raised.value).startswith(f"hostfile {path}:")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_file_without_hosts_or_missing_is_an_error(tmp_path):
    path = hostfile(tmp_path, "# every host drained\n\n")
    with pytest.raises(UserError, match="lists no hosts"):
        hosts.read_hostfile(path)
    assert hosts.read_hostfile(path, allow_empty=True) == []
    with pytest.raises(UserError, match="hostfile .*/absent: No such file or directory"):
        hosts.read_hostfile(tmp_path / "absent")


def test_host_list_round_trip():
    listed = hosts.parse_host_list("a:2,node-2.example:4")
    assert listed == [Host("a", 2), Host("node-2.example", 4)]
    assert hosts.host_list(listed) == "a:2,node-2.example:4"
    assert hosts.total_slots(listed) == 6


@pytest.mark.parametrize("text, message", [
    ("a:2,b", "-H a:2,b: 'b' is not HOST:SLOTS (want a list such as a:2,b:2)"),
    ("a:0", "-H a:0: host a has 0 slots; each host needs at least 1"),
    ("a:1,a:1", "-H a:1,a:1: names host a more than once"),
    ("a:1,-v:1", "-H a:1,-v:1: host name '-v' begins with '-': ssh would read it as an option"),
])
def test_a_bad_host_list_is_one_error(text, message):
    with pytest.raises(UserError) as raised:
        hosts.parse_host_list(text)
    assert str(raised.value) == message


@pytest.mark.parametrize("value, login_s", [(None, 15.0), ("", 15.0), ("3", 3.0),
                                            ("90.5", 90.5)])
def test_the_ssh_login_limit_is_15_s_unless_set(value, login_s):
    env = {} if value is None else {"HVT_SSH_LOGIN_TIMEOUT_S": value}
    assert hosts.login_timeout_s(env) == login_s
    # Every host's check, side by side, outlasts the slowest login by the same margin.
    assert hosts.check_deadline_s(login_s) == login_s + 25


@pytest.mark.parametrize("value", ["0", "-1", "soon", "1e9"])
def test_a_bad_ssh_login_limit_is_one_line(value):
    with pytest.raises(UserError) as raised:
        hosts.login_timeout_s({"HVT_SSH_LOGIN_TIMEOUT_S": value})
    assert str(raised.value) == f"HVT_SSH_LOGIN_TIMEOUT_S={value}: want seconds, a number above 0"
