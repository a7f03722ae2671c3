"""This machine's interfaces as the kernel reports them (iproute2), read by
horovod_train/core/interfaces.py, also under a bare python. The rules
that choose among them (launch/network.py) are test_network.py's."""

import json
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
