"""Host discovery for Horovod Elastic: print the hosts an operator lists in
a hosts file, one `HOST:SLOTS` line each, the form horovodrun's
--host-discovery-script must print. horovodrun runs it every few seconds;
removing a host from the file takes it out of the job at the next commit,
adding one brings its ranks in.

The file is a hostfile (hosts.read_hostfile, see hostfiles/README.md):
`HOST slots=N` lines, a bare HOST for one slot, blank lines and `#`
comments. A file that cannot be read or has a bad line is an error (exit 2)
rather than an empty host list, which horovodrun would read as every host
gone; a file that lists no host on purpose (all drained) prints nothing."""

import argparse
import sys
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, run_main
from horovod_train.launch import hosts


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="discover_hosts", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hosts_file", type=Path)
    args = parser.parse_args(argv)
    for host in hosts.read_hostfile(args.hosts_file, allow_empty=True):
        print(host)
    return 0


def cli() -> None:
    """The command's entry (python -m, through scripts/python.sh)."""
    run_main(lambda: main(sys.argv[1:]), prog="discover_hosts")


if __name__ == "__main__":
    cli()
