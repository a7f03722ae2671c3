"""scripts/launch.sh: horovodrun, with its input checked first.

    scripts/launch.sh -np 4 -H a:2,b:2 python horovod_train/pytorch_mnist.py

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
  - the network: with remote hosts, each host connects to every other on
    each candidate network (launch/network.py, run over ssh); where
    several join every host the fastest is chosen. A network named with
    --network-interface(s) or HVT_NETWORK_INTERFACE (one setting, the same
    on every path: interface names, HOST:NAME items, IPv4 networks in CIDR
    form) is checked the same way. horovodrun gets the choice as
    --network-interfaces (names where every host has them, else networks
    in CIDR form) and skips its own probe.

With --preflight (the launcher's own option, not horovodrun's), the
hosts, every pair of them and an allreduce over the ranks are checked first
(scripts/preflight.sh, launch/preflight.py): its table, and a line per
culprit and exit 1 before any rank starts when something is wrong.

A problem is one line, `launch: error: ...`, and exit 2, before any rank
starts. The first line of a run says the network and why the others were
left out. Otherwise horovodrun replaces this process with the same arguments,
but for the network's (above) and -hostfile FILE, which becomes -H with the
hosts FILE lists:
horovodrun's own hostfile reader fails on comments, blank lines and a host
without slots=. The project's Open MPI settings (docker/openmpi-mca-params.conf:
mpirun notices a host that stopped answering) come with it as OMPI_MCA_*
variables. Elastic runs (--host-discovery-script) are passed on
unchecked, with the project's --blacklist-cooldown-range 5 120 and
--elastic-timeout 300 where you give neither (docs/elastic-and-failures.md).
"""

import argparse
import importlib.resources
import os
import shutil
import sys
from pathlib import Path

from horovod_train.core.errors import UserError, run_main
from horovod_train.launch import hosts, network


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
    """The hosts of the launch, checked (the network apart); None for an
    elastic run."""
    if not args.command:
        raise UserError("no command to run: give it after horovodrun's options, "
                        "e.g. python horovod_train/pytorch_mnist.py")
    if args.host_discovery_script:
        return None  # elastic: hosts come and go while the job runs
    listed, origin = planned_hosts(args)
    hosts.check_process_count(args.num_proc, listed, origin)
    names = [host.name for host in listed]
    hosts.check_reachable(names, args.ssh_port, args.ssh_identity_file)
    return listed


def named_network(argv: list[str], command: list[str], env: dict) -> list[str] | None:
    """The network the user named: --network-interface(s) (as written, in
    order) or HVT_NETWORK_INTERFACE, which mean one thing; a UserError where
    both are given and differ."""
    flag = [value for _, _, value in nic_options(argv[:len(argv) - len(command)])]
    try:
        from_flag = network.parse_named(",".join(flag), "--network-interface") if flag else None
        from_env = network.parse_named(env.get("HVT_NETWORK_INTERFACE"))
    except ValueError as err:
        raise UserError(str(err)) from None
    if from_flag and from_env and from_flag != from_env:
        raise UserError(f"--network-interface {','.join(from_flag)} and HVT_NETWORK_INTERFACE="
                        f"{','.join(from_env)} disagree: give one")
    return from_flag or from_env or None


def nic_options(options: list[str]) -> list[tuple[int, int, str]]:
    """Where --network-interface(s) are among horovodrun's options: the
    index of each, how many words it takes (1 for --option=VALUE, else 2),
    and its value."""
    found = []
    for index, word in enumerate(options):
        name, equals, value = word.partition("=")
        if name in ("--network-interface", "--network-interfaces"):
            found.append((index, 1, value) if equals else
                         (index, 2, options[index + 1] if index + 1 < len(options) else ""))
    return found


def with_nics(argv: list[str], command: list[str], nics: str) -> list[str]:
    """argv with the user's --network-interface(s) replaced by the probe's choice."""
    options, rest = argv[:len(argv) - len(command)], argv[len(argv) - len(command):]
    dropped = {index + word for index, words, _ in nic_options(options)
               for word in range(words)}
    kept = [word for index, word in enumerate(options) if index not in dropped]
    return ["--network-interfaces", nics, *kept, *rest]


def choose_network(args: argparse.Namespace, argv: list[str], listed: list[hosts.Host],
                   env: dict) -> list[str]:
    """argv with the network for horovodrun, chosen or checked by the probe
    where a host is remote; its first line printed."""
    named = named_network(argv, args.command, env)
    names = [host.name for host in listed]
    if len(names) < 2 or all(hosts.is_local(name) for name in names):
        return argv  # one host: horovodrun uses loopback
    choice = hosts.choose_network(names, named, args.ssh_port, args.ssh_identity_file, env)
    print("; ".join([f"launch: network {choice.said}", *choice.left_out]), flush=True)
    return with_nics(argv, args.command, choice.horovodrun_nics)


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


def read_mca_file(path) -> dict[str, str]:
    """An Open MPI parameter file's `name = value` lines ({} where unreadable)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    settings = {}
    for line in text.splitlines():
        name, equals, value = line.split("#", 1)[0].partition("=")
        if equals:
            settings[name.strip()] = value.strip()
    return settings


def mpi_settings_environment(path=MPI_SETTINGS) -> dict[str, str]:
    """The file's `name = value` lines as OMPI_MCA_name variables."""
    return {f"OMPI_MCA_{name}": value for name, value in read_mca_file(path).items()}


# What horovodrun's mpirun puts on its command line for every rank (in the
# project's Horovod: docker/env/patches/*-mpi-without-ofi-btl.patch). Ranks
# that srun starts get them as variables, or each pays the OFI btl's start
# and finish again.
HOROVODRUN_MCA = {"pml": "ob1", "btl": "^openib,ofi"}


def site_mca_files(env: dict) -> list[Path]:
    """The parameter files Open MPI reads, as it looks for them: the
    installation's (beside the mpirun on PATH; Debian's in /etc/openmpi)
    and the user's, or those OMPI_MCA_mca_param_files names."""
    named = env.get("OMPI_MCA_mca_param_files")
    if named:
        return [Path(item) for item in named.split(":") if item]
    mpirun = shutil.which("mpirun", path=env.get("PATH"))
    prefixes = [Path(mpirun).resolve().parent.parent] if mpirun else []
    found = [prefix / "etc" / "openmpi-mca-params.conf" for prefix in prefixes]
    found.append(Path("/etc/openmpi/openmpi-mca-params.conf"))
    if env.get("HOME"):
        found.append(Path(env["HOME"]) / ".openmpi" / "mca-params.conf")
    return list(dict.fromkeys(found))


def site_mca_settings(env: dict) -> dict[str, str]:
    """What the site's parameter files set (the later file wins, as in Open MPI)."""
    settings: dict[str, str] = {}
    for path in reversed(site_mca_files(env)):
        settings.update(read_mca_file(path))
    return settings


def rank_mpi_environment(env: dict) -> dict[str, str]:
    """Open MPI settings for ranks started without mpirun (srun's): what
    horovodrun's mpirun gives its ranks and the project's file, as
    OMPI_MCA_* variables, where neither the environment nor the site's
    parameter files set the parameter already."""
    site = site_mca_settings(env)
    wanted = {**HOROVODRUN_MCA, **read_mca_file(MPI_SETTINGS)}
    return {f"OMPI_MCA_{name}": value for name, value in wanted.items()
            if name not in site and f"OMPI_MCA_{name}" not in env}


def horovodrun_path() -> str:
    """The horovodrun installed beside this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if not found:
        raise UserError("horovodrun not found beside this Python or on PATH "
                        "(scripts/setup.sh installs it)")
    return found


# The project's settings for elastic runs (docs/elastic-and-failures.md),
# where the user gives none. Horovod's own defaults leave a user with
# nothing: a host that failed once is held out for good (no cooldown), so a
# job below --min-np can never grow back, and waits 600 s for it. A cooldown
# of 5 s doubling per failure (first 10-15 s, at most 120 s) takes a
# repaired host back soon and keeps a flapping one out longer; the timeout
# outlasts the longest cooldown, so a host listed again always gets its chance.
ELASTIC_COOLDOWN_RANGE_S = (5, 120)
ELASTIC_TIMEOUT_S = 300


def with_elastic_defaults(args: argparse.Namespace, argv: list[str],
                          env: dict) -> list[str]:
    """argv with the project's --blacklist-cooldown-range and --elastic-timeout
    for an elastic run (horovodrun's rule: --host-discovery-script or
    --min-np), each where the user sets none (its options or, for the
    timeout, HOROVOD_ELASTIC_TIMEOUT); others' argv as it is."""
    if args.host_discovery_script is None and args.min_num_proc is None:
        return argv
    added = []
    if args.cooldown_range is None:
        added += ["--blacklist-cooldown-range", *map(str, ELASTIC_COOLDOWN_RANGE_S)]
    if args.elastic_timeout is None and not env.get("HOROVOD_ELASTIC_TIMEOUT"):
        added += ["--elastic-timeout", str(ELASTIC_TIMEOUT_S)]
    return added + argv


def without_preflight(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether --preflight is among horovodrun's options (never the
    command's), and argv without it: horovodrun does not know it."""
    for index, word in enumerate(argv):
        if word == "--preflight":
            rest = argv[:index] + argv[index + 1:]
            if index <= len(rest) - len(parse_horovodrun_args(rest).command):
                return True, rest
            break
    return False, argv


def preflight(args: argparse.Namespace, argv: list[str], listed: list[hosts.Host] | None) -> None:
    """scripts/preflight.sh over the launch's hosts, network and controller;
    a problem ends the launch (exit 1) before any rank starts."""
    from horovod_train.launch import preflight as checks

    if listed is None:
        raise UserError("--preflight checks the hosts of -H or a hostfile; for an elastic run, "
                        "run scripts/preflight.sh on the hosts its discovery lists")
    request = checks.Request(
        listed, args.num_proc, args.ssh_port, args.ssh_identity_file,
        named_network(argv, args.command, dict(os.environ)),
        "gloo" if args.use_gloo else "mpi" if args.use_mpi else None,
        Path.cwd(), allreduce=True, cpu_only="--no-cuda" in args.command)
    if checks.run(request) != 0:
        raise SystemExit(1)


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    asked, argv = without_preflight(argv)
    args = parse_horovodrun_args(argv)
    listed = check(args)
    if asked:
        preflight(args, argv, listed)
    if listed:
        argv = choose_network(args, argv, listed, dict(os.environ))
    if args.hostfile:
        argv = with_host_list(argv, args.command, listed)
    argv = with_elastic_defaults(args, argv, dict(os.environ))
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
