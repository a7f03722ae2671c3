"""The emulated cluster: hosts a and b with their own names and addresses,
sshd taking the cluster's key only (plain hosts on 22 as bare hosts, image
hosts on the image's port), and a `down` that leaves
nothing behind. The same checks run against plain hosts and against hosts
that are containers of the training image (its entrypoint, its sshd)."""

import subprocess
from pathlib import Path

import pytest
from conftest import EMULATE, run_on

from horovod_train.launch.hosts import IMAGE_SSH_PORT

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", params=["plain", "image"])
def host_kind(request) -> str:
    # Module scope makes pytest run all tests of one kind, then the other:
    # switching kinds rebuilds the hosts.
    return request.param


@pytest.fixture
def hosts(host_kind, request) -> dict:
    return request.getfixturevalue("cluster" if host_kind == "plain" else "image_cluster")


def test_each_host_has_its_own_name_resolving_to_its_address(hosts):
    for host, address in hosts["hosts"].items():
        assert run_on(host, "hostname").stdout.strip() == host
        for other, other_address in hosts["hosts"].items():
            resolved = run_on(host, "getent", "hosts", other).stdout.split()
            assert resolved[0] == other_address
        assert address in run_on(host, "ip", "-brief", "addr", "show", "eth0").stdout


def test_hosts_reach_each_other_by_ssh_with_the_cluster_key(hosts, host_kind):
    assert run_on("a", "ssh", "b", "hostname").stdout.strip() == "b"
    assert run_on("b", "ssh", "a", "hostname").stdout.strip() == "a"
    # The port ssh uses with no -p: plain hosts are bare hosts (sshd on 22,
    # no Port in their ssh config); image hosts are on the image's port.
    expected = 22 if host_kind == "plain" else IMAGE_SSH_PORT
    assert hosts["port"] == expected
    said = run_on("a", "ssh", "-G", "b").stdout.splitlines()
    assert f"port {expected}" in said


def test_hosts_reach_only_the_cluster_network(hosts):
    routes = run_on("a", "ip", "route").stdout
    assert "default" not in routes
    assert routes.strip().startswith(hosts["bridge_address"].rsplit(".", 1)[0] + ".0/24")


def test_password_login_is_refused(hosts):
    result = run_on("a", "ssh", "-o", "PubkeyAuthentication=no",
                    "-o", "PreferredAuthentications=password,keyboard-interactive", "b", "true")
    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr


def test_a_key_that_is_not_the_clusters_is_refused(hosts):
    """A fresh key made on host a, offered alone to b's sshd."""
    result = run_on("a", "sh", "-c",
                    "rm -f /tmp/stranger /tmp/stranger.pub && "
                    "ssh-keygen -q -t ed25519 -N '' -f /tmp/stranger && "
                    "ssh -F none -i /tmp/stranger -o IdentitiesOnly=yes -o BatchMode=yes "
                    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                    f"-p {hosts['port']} root@b true")
    assert result.returncode == 255
    assert "Permission denied (publickey)" in result.stderr


def test_plain_hosts_answer_with_keys_of_their_own_image_hosts_with_the_clusters(host_kind,
                                                                              hosts):
    """The key each host's sshd shows (ssh-keyscan from a): plain hosts, like
    bare ones, each their own; containers of the image, the cluster's host
    key from scripts/cluster_keys.sh."""
    keys = {}
    for host in hosts["hosts"]:
        scan = run_on("a", "ssh-keyscan", "-t", "ed25519", "-p", str(hosts["port"]), host)
        keys[host] = scan.stdout.split()[2]
    if host_kind == "plain":
        assert len(set(keys.values())) == len(keys), keys
    else:
        cluster_key = Path(hosts["state_dir"]) / "keys" / "ssh_host_ed25519_key.pub"
        assert set(keys.values()) == {cluster_key.read_text().split()[1]}, keys


def test_cluster_private_key_is_readable_by_root_only(cluster):
    key = Path(cluster["state_dir"]) / "keys" / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    assert (key.parent.stat().st_mode & 0o777) == 0o700


def test_down_removes_everything_and_up_restores(cluster):
    down = subprocess.run([str(EMULATE), "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert "hvt-" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                        text=True).stdout
    assert subprocess.run(["ip", "link", "show", cluster["bridge"]],
                          capture_output=True).returncode != 0
    assert not Path(cluster["state_dir"]).exists()
    again = subprocess.run([str(EMULATE), "down"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0  # nothing left to remove is not an error

    up = subprocess.run([str(EMULATE), "up"], capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    assert run_on("a", "ssh", "b", "hostname").stdout.strip() == "b"


def test_exec_on_an_unknown_host_is_one_line(cluster):
    result = subprocess.run([str(EMULATE), "exec", "z", "--", "true"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2  # bad input
    assert result.stderr.strip() == "emulate_cluster: error: no host 'z'; hosts are a, b"


def test_shape_limits_each_hosts_link_and_off_removes_it(cluster):
    try:
        shaped = subprocess.run([str(EMULATE), "shape", "--rate", "1gbit"], capture_output=True,
                                text=True, timeout=60)
        assert shaped.returncode == 0, shaped.stderr
        for host in cluster["hosts"]:
            qdisc = subprocess.run(["tc", "-n", f"hvt-{host}", "qdisc", "show", "dev", "eth0"],
                                   capture_output=True, text=True, timeout=30).stdout
            assert "tbf" in qdisc and "rate 1Gbit" in qdisc, qdisc
        status = subprocess.run([str(EMULATE), "status"], capture_output=True, text=True,
                                timeout=30)
        assert '"rate": "1gbit"' in status.stdout
    finally:
        off = subprocess.run([str(EMULATE), "shape", "--off"], capture_output=True, text=True,
                             timeout=60)
    assert off.returncode == 0, off.stderr
    qdisc = subprocess.run(["tc", "-n", "hvt-a", "qdisc", "show", "dev", "eth0"],
                           capture_output=True, text=True, timeout=30).stdout
    assert "tbf" not in qdisc


@pytest.mark.parametrize("argv", [["--rate", "fast"], ["--rate", "0gbit"], []])
def test_shape_with_a_bad_rate_is_one_line(cluster, argv):
    result = subprocess.run([str(EMULATE), "shape", *argv], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("emulate_cluster: error: ")
