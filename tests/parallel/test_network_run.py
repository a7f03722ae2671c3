"""This machine's interfaces as the kernel reports them (iproute2), read by
horovod_train/core/interfaces.py, also under a bare python. The rules
that choose among them (launch/network.py) are test_network.py's."""

import json
import socket
import subprocess

from horovod_train.core import interfaces
from horovod_train.core.interfaces import Interface


def test_this_machines_interfaces_are_what_iproute2_reports():
    """The kernel's ioctls against `ip -j addr`: every interface, its state
    and its first IPv4 address."""
    listed = json.loads(subprocess.run(["ip", "-j", "addr", "show"], capture_output=True,
                                       text=True, check=True).stdout)
    found = {iface.name: iface for iface in interfaces.local_interfaces()}
    assert set(found) == {item["ifname"] for item in listed}
    for item in listed:
        iface = found[item["ifname"]]
        ipv4 = [a for a in item.get("addr_info", []) if a["family"] == "inet"]
        assert iface.address == (f"{ipv4[0]['local']}/{ipv4[0]['prefixlen']}" if ipv4 else None)
        assert iface.loopback == ("LOOPBACK" in item["flags"])
        assert iface.up == ("UP" in item["flags"] and "LOWER_UP" in item["flags"])
    assert found["lo"] == Interface("lo", True, True, "127.0.0.1/8")


def test_list_prints_the_interfaces_as_json_under_a_bare_python():
    result = subprocess.run(["python3", "-", "list"], input=interfaces.SOURCE.read_text(),
                            capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr
    listed = interfaces.interfaces_from_json(json.loads(result.stdout))
    assert listed == interfaces.local_interfaces(others=True)


def test_the_probe_answers_only_what_brings_the_jobs_token():
    """A node's part of the probe under a bare python, as on another host:
    a connection or a datagram without the job's token (its first line on
    stdin) gets nothing; with it, the node's name and the echo."""
    token = bytes(range(interfaces.TOKEN_BYTES))
    task = subprocess.Popen(["python3", "-c", interfaces.SOURCE.read_text(), "probe", "n1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin"})
    try:
        task.stdin.write(json.dumps({"token": token.hex()}) + "\n")
        task.stdin.flush()
        hello = json.loads(task.stdout.readline())
        assert hello["node"] == "n1"

        def first_line(sent: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", hello["port"]), timeout=10) as conn:
                conn.sendall(sent)
                return conn.makefile("rb").readline()

        assert first_line(b"x" * interfaces.TOKEN_BYTES) == b""  # closed, not a word
        assert first_line(token) == b"n1\n"

        def echoed(sent: bytes) -> bytes | None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(0.5)
                sock.sendto(sent, ("127.0.0.1", hello["echo_port"]))
                try:
                    return sock.recv(64)
                except TimeoutError:
                    return None

        assert echoed(b"\0" * 20) is None
        assert echoed(token + b"\0\0\0\7") == token + b"\0\0\0\7"
        assert interfaces.ping("127.0.0.1", hello["echo_port"], token)["lost"] == 0
    finally:
        task.stdin.close()
        task.wait(timeout=10)
    assert task.returncode == 0


def test_a_probe_whose_first_line_is_not_a_token_ends_in_one_line():
    result = subprocess.run(["python3", "-c", interfaces.SOURCE.read_text(), "probe", "n1"],
                            input='{"addresses": {}}\n', capture_output=True, text=True,
                            timeout=30, env={"PATH": "/usr/bin"})
    assert result.returncode == 2
    assert result.stderr == "the network probe: its first line is not the job's token\n"
