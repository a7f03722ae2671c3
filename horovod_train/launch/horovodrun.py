"""scripts/launch.sh: horovodrun, with its input checked first.

    scripts/launch.sh -np 4 -H a:2,b:2 -p 12345 python horovod_train/pytorch_mnist.py

Takes exactly horovodrun's arguments (horovodrun --help lists them) and
checks, before anything starts:

  - the -H list (HOST:SLOTS,...) or the -hostfile, in OpenMPI's conventions
    (`HOST`, `HOST slots=N`, `max_slots=M`, # comments, blank lines; see
    hostfiles/README.md), slots >= 1, no host named twice;
  - -np at least 1 and no more than the slots;
  - every remote host: its name resolves, its SSH port (-p, else its
    ssh_config) answers with SSH, and ssh logs in there in BatchMode, as
    horovodrun will; all hosts side by side, within about 40 s. This
    machine's names need no check;
  - an interface named with --network-interface(s): on every host, up,
    with an IPv4 address no other host has, all on one subnet (horovodrun
    then skips its own probe and trusts the name).

A problem is one line, `launch: error: ...`, and exit 2, before any process
starts. Otherwise horovodrun replaces this process with the same arguments,
but for -hostfile FILE, which becomes -H with the hosts FILE lists:
horovodrun's own hostfile reader fails on comments, blank lines and a host
without slots=. The project's Open MPI settings (docker/openmpi-mca-params.conf:
mpirun notices a host that stopped answering) come with it as OMPI_MCA_*
variables. Elastic runs (--host-discovery-script) are passed on
unchecked.
"""

import argparse
import importlib.resources
import os
import shutil
import sys
from pathlib import Path

from horovod_train.core.errors import UserError, run_main
from horovod_train.launch import hosts


def _usage_error(parser: argparse.ArgumentParser, message: str):
    raise UserError(message)


def parse_horovodrun_args(argv: list[str]) -> argparse.Namespace:
    """horovodrun's own parser, so that the checks read the arguments exactly
    as horovodrun will (which option takes a value, where the command
    starts); its usage errors become one line instead of usage text."""
    from horovod.runner import launch as horovod_launch

    # parse_args() reads sys.argv and reports through parser.error(); both
    # are swapped for the call only.
    saved_argv, saved_error = sys.argv, argparse.ArgumentParser.error
    sys.argv = ["horovodrun", *argv]
    argparse.ArgumentParser.error = _usage_error
    try:
        return horovod_launch.parse_args()
    except (OSError, ValueError) as err:  # --config-file unreadable or invalid
        raise UserError(str(err)) from None
    finally:
        sys.argv, argparse.ArgumentParser.error = saved_argv, saved_error


def planned_hosts(args: argparse.Namespace) -> tuple[list[hosts.Host], str]:
    """The hosts and slots horovodrun will use, and where they were given."""
    if args.hosts:
        return hosts.parse_host_list(args.hosts), f"-H {args.hosts}"
    if args.hostfile:
        return hosts.read_hostfile(args.hostfile), f"hostfile {args.hostfile}"
    return [hosts.Host("localhost", max(args.num_proc, 1))], "this machine"


def check(args: argparse.Namespace) -> list[hosts.Host] | None:
    """The hosts of the launch, checked; None for an elastic run."""
    if not args.command:
        raise UserError("no command to run: give it after horovodrun's options, "
                        "e.g. python horovod_train/pytorch_mnist.py")
    if args.host_discovery_script:
        return None  # elastic: hosts come and go while the job runs
    listed, origin = planned_hosts(args)
    hosts.check_process_count(args.num_proc, listed, origin)
    names = [host.name for host in listed]
    hosts.check_reachable(names, args.ssh_port, args.ssh_identity_file)
    if args.nics:
        hosts.check_interfaces(sorted(args.nics), names, args.ssh_port, args.ssh_identity_file)
    return listed


# How horovodrun's parser can be given the hostfile: its two names, and the
# abbreviations argparse accepts (--hostf and longer; --host is ambiguous).
def is_hostfile_option(word: str) -> bool:
    return word == "-hostfile" or (word.startswith("--hostf") and "--hostfile".startswith(word))


def with_host_list(argv: list[str], command: list[str], listed: list[hosts.Host]) -> list[str]:
    """argv with `-hostfile FILE` (or `--hostfile=FILE`) replaced by `-H` and
    the hosts FILE lists. Only horovodrun's options are looked at, never the
    command after them."""
    options, rest = argv[:len(argv) - len(command)], argv[len(argv) - len(command):]
    rewritten = []
    words = iter(options)
    for word in words:
        name, equals, _ = word.partition("=")
        if is_hostfile_option(name):
            if not equals:
                next(words, None)  # the file, a word of its own
            rewritten += ["-H", hosts.host_list(listed)]
        else:
            rewritten.append(word)
    return rewritten + rest


# The project's Open MPI settings (why: in the file), for launches outside
# the image, whose Open MPI reads them from its own configuration. The
# package carries them (package data; in the checkout, a link to the image's
# copy in docker/), so an installed launcher finds them wherever it runs.
MPI_SETTINGS = importlib.resources.files("horovod_train.launch") / "openmpi-mca-params.conf"


def mpi_settings_environment(path=MPI_SETTINGS) -> dict[str, str]:
    """The file's `name = value` lines as OMPI_MCA_name variables."""
    settings = {}
    for line in path.read_text().splitlines():
        name, equals, value = line.split("#", 1)[0].partition("=")
        if equals:
            settings[f"OMPI_MCA_{name.strip()}"] = value.strip()
    return settings


def horovodrun_path() -> str:
    """The horovodrun installed beside this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if not found:
        raise UserError("horovodrun not found beside this Python or on PATH "
                        "(scripts/setup.sh installs it)")
    return found


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    args = parse_horovodrun_args(argv)
    listed = check(args)
    if args.hostfile:
        argv = with_host_list(argv, args.command, listed)
    horovodrun = horovodrun_path()
    for name, value in mpi_settings_environment().items():
        os.environ.setdefault(name, value)
    sys.stdout.flush()
    os.execv(horovodrun, [horovodrun, *argv])
    return 0  # not reached


def cli() -> None:
    """The command's entry (python -m, through scripts/python.sh)."""
    run_main(lambda: main(sys.argv[1:]), prog="launch")


if __name__ == "__main__":
    cli()
