"""scripts/discover_hosts.sh: the hosts file operators edit, printed the way
horovodrun's --host-discovery-script must print it; a broken file is an
error, not an empty list (which would read as every host gone)."""

import os
import subprocess

from conftest import BIN, REPO

SCRIPT = REPO / "scripts" / "discover_hosts.sh"


def discover(hosts_file) -> subprocess.CompletedProcess:
    env = {**os.environ, "HVT_ELASTIC_HOSTS_FILE": str(hosts_file),
           "HVT_PYTHON": str(BIN / "python")}
    return subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=30,
                          cwd="/")


def test_hosts_are_printed_as_host_colon_slots_comments_and_blank_lines_skipped(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# the cluster\na slots=2\n\nnode-2.example slots=4  # new\nc\n")
    result = discover(hosts)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "a:2\nnode-2.example:4\nc:1\n"


def test_an_emptied_file_means_no_hosts(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# everyone drained\n")
    result = discover(hosts)
    assert (result.returncode, result.stdout) == (0, "")


def test_the_default_file_is_the_two_emulated_hosts():
    env = {**os.environ, "HVT_PYTHON": str(BIN / "python")}
    env.pop("HVT_ELASTIC_HOSTS_FILE", None)
    result = subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=30)
    assert result.stdout == "a:2\nb:2\n"


def test_a_bad_line_or_a_missing_file_is_one_line_and_exit_2(tmp_path):
    hosts = tmp_path / "hosts"
    for text, message in (("a slots=2\nb:2\n", f"{hosts}:2: cannot read 'b:2': want HOST"),
                          ("a slots=0\n", f"{hosts}:1: host a has 0 slots"),
                          ("a\na\n", f"{hosts}:2: host a is listed again")):
        hosts.write_text(text)
        result = discover(hosts)
        assert result.returncode == 2
        assert result.stderr.startswith("discover_hosts: error:") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
    result = discover(tmp_path / "absent")
    assert result.returncode == 2 and "No such file" in result.stderr


def test_help_says_how_to_launch():
    result = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "--host-discovery-script" in result.stdout
