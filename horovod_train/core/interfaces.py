"""This host's network interfaces, read from the kernel, and the networks
a job chose (IPv4 networks in CIDR form) turned into this host's interface
names: each node may call the same network by a different name.

    python interfaces.py list    this host's interfaces, as JSON

Standard library only, and runnable as a script under a bare python3
(`python3 - list`, the source on stdin): the launchers read other hosts'
interfaces with it (launch/network.py), and each rank reads its own host's
at its start (core/runtime.py). IPv4 is read with the kernel's ioctls (one
address per interface, the primary one); IPv6 only to say that an
interface has it, from /proc/net/if_inet6.
"""

import dataclasses
import fcntl
import ipaddress
import json
import socket
import struct
import sys
from pathlib import Path

# <linux/sockios.h> and <linux/if.h>
SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40
IPV6_TABLE = Path("/proc/net/if_inet6")
IPV6_LOCAL_SCOPES = {0x10, 0x20}  # host and link: every interface has those, they route nowhere


@dataclasses.dataclass(frozen=True)
class Interface:
    name: str
    up: bool  # administratively up and with a carrier (a cable, a peer, a port)
    loopback: bool
    address: str | None  # IPv4 in CIDR form, "10.0.0.11/24"; None without one
    ipv6: bool = False  # has an IPv6 address beyond host and link scope

    @property
    def ip(self) -> str | None:
        return self.address.split("/")[0] if self.address else None

    @property
    def network(self) -> ipaddress.IPv4Network | None:
        return ipaddress.IPv4Interface(self.address).network if self.address else None


def ipv6_names() -> set[str]:
    """The interfaces with an IPv6 address that routes beyond the host and link."""
    try:
        lines = IPV6_TABLE.read_text().splitlines()
    except OSError:  # a kernel without IPv6
        return set()
    return {fields[5] for fields in (line.split() for line in lines)
            if len(fields) == 6 and int(fields[3], 16) not in IPV6_LOCAL_SCOPES}


def local_interfaces() -> list[Interface]:
    """This host's interfaces, in the kernel's order."""
    found = []
    with_ipv6 = ipv6_names()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            flags = struct.unpack_from("H", fcntl.ioctl(sock, SIOCGIFFLAGS, request), 16)[0]
            try:
                ip = socket.inet_ntoa(fcntl.ioctl(sock, SIOCGIFADDR, request)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(sock, SIOCGIFNETMASK, request)[20:24])
                address = str(ipaddress.IPv4Interface(f"{ip}/{mask}"))
            except OSError:  # EADDRNOTAVAIL: no IPv4 address
                address = None
            found.append(Interface(name, bool(flags & IFF_UP and flags & IFF_RUNNING),
                                   bool(flags & IFF_LOOPBACK), address, name in with_ipv6))
    return found


def interfaces_from_json(items: list[dict]) -> list[Interface]:
    return [Interface(**item) for item in items]


def parse_networks(text: str) -> list[ipaddress.IPv4Network]:
    """A comma-separated list of IPv4 networks in CIDR form; a ValueError of
    one line for an item that is not one."""
    networks = []
    for item in (item.strip() for item in text.split(",")):
        try:
            networks.append(ipaddress.IPv4Network(item))
        except ValueError:
            raise ValueError(f"{item!r} is not an IPv4 network in CIDR form "
                             "(e.g. 10.0.0.0/24)") from None
    return networks


def names_on(networks: list[ipaddress.IPv4Network], interfaces: list[Interface]) -> list[str]:
    """The names of the interfaces whose IPv4 address lies on one of
    `networks`, in the networks' order (Open MPI matches an address to a
    network in CIDR form the same way)."""
    names: list[str] = []
    for network in networks:
        names += [iface.name for iface in interfaces
                  if iface.address and iface.name not in names
                  and ipaddress.IPv4Address(iface.ip) in network]
    return names


SOURCE = Path(__file__).resolve()  # run as a script on other hosts (python3 - list)

if __name__ == "__main__":
    if sys.argv[1:] != ["list"]:
        print("usage: python3 interfaces.py list", file=sys.stderr)
        sys.exit(2)
    print(json.dumps([dataclasses.asdict(iface) for iface in local_interfaces()]))
