"""Host discovery for Horovod Elastic: print the hosts an operator lists in
a hosts file, one `HOST:SLOTS` line each, the form horovodrun's
--host-discovery-script must print. horovodrun runs it every few seconds;
removing a host from the file takes it out of the job at the next commit,
adding one brings its ranks in.

The file is the hostfile format (`HOST slots=N`, see hostfiles/), with blank
lines and `#` comments allowed, since people edit it by hand. A file that
cannot be read or has a bad line is an error (exit 2) rather than an empty
host list, which horovodrun would read as every host gone."""

import argparse
import re
import sys
from pathlib import Path

LINE = re.compile(r"^([\w.-]+)\s+slots=(\d+)$")


class DiscoveryError(Exception):
    pass


def read_hosts(path: Path) -> list[tuple[str, int]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise DiscoveryError(f"{path}: {getattr(err, 'strerror', None) or err}") from None
    hosts = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = LINE.match(line)
        if not match or int(match[2]) < 1:
            raise DiscoveryError(f"{path} line {number}: want 'HOST slots=N' with N >= 1, "
                                 f"got {raw.strip()!r}")
        hosts.append((match[1], int(match[2])))
    return hosts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="discover_hosts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hosts_file", type=Path)
    args = parser.parse_args(argv)
    try:
        hosts = read_hosts(args.hosts_file)
    except DiscoveryError as err:
        print(f"discover_hosts: error: {err}", file=sys.stderr)
        return 2
    for name, slots in hosts:
        print(f"{name}:{slots}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
