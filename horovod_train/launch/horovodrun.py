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
    in CIDR form) and probes nothing itself (a literal horovodrun, without
    launch.sh, takes the same choice through the project's Horovod);
  - the script's options, where the script answers --check-options (the
    project's trainers, and any script that carries the line
    `# horovod-train: answers --check-options`): its own check, once,
    before any rank would print the same line. Any other command runs as
    it is, with its own options (docs/your-script.md).

With --preflight (the launcher's own option, not horovodrun's), the
hosts, every pair of them and an allreduce over the ranks are checked first
(scripts/preflight.sh, launch/preflight.py): its table, and a line per
culprit and exit 1 before any rank starts when something is wrong.

Bad input is one line, `launch: error: ...`, and exit 2, before any rank
starts; a network that cannot carry the job and a preflight culprit end it
with exit 1 (the steps and the convention: launch/pipeline.py). The first
line of a run says the network and why the others were left out.
Otherwise horovodrun replaces this process with the same arguments, but for
the network's (above) and -hostfile FILE, which becomes -H with the hosts
FILE lists:
horovodrun's own hostfile reader fails on comments, blank lines and a host
without slots=. The project's Open MPI settings (docker/openmpi-mca-params.conf:
mpirun notices a host that stopped answering) come with it as OMPI_MCA_*
variables. Elastic runs (--host-discovery-script) are passed on
unchecked, with the project's --blacklist-cooldown-range 5 120 and
--elastic-timeout 300 where you give neither (docs/elastic-and-failures.md).
"""

import argparse
import os
import sys

from horovod_train.core.errors import UserError, run_main
from horovod_train.launch import hosts, pipeline, starters
from horovod_train.launch.job import Job, named_network
from horovod_train.launch.prepare import prepare


def _usage_error(parser: argparse.ArgumentParser, message: str):
    raise UserError(message)


def parse_horovodrun_args(argv: list[str]) -> argparse.Namespace:
    """horovodrun's own parser, so that the checks read the arguments exactly
    as horovodrun will (which option takes a value, where the command
    starts); its usage errors become one line instead of usage text."""
    # Horovod is imported here, not above: --help answers under a bare
    # python3 too, before any environment is set up.
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


def job_of(args: argparse.Namespace, argv: list[str], env: dict) -> Job | None:
    """The launch's job (horovodrun's arguments `argv`, as parsed in
    `args`), its input checked (the hosts aside); None for an elastic run,
    whose hosts come and go while it runs."""
    if not args.command:
        raise UserError("no command to run: give it after horovodrun's options, "
                        "e.g. python horovod_train/pytorch_mnist.py")
    flag = [value for _, _, value in pipeline.nic_options(options_of(argv, args.command))]
    named = named_network(",".join(flag) if flag else None, env)
    if args.host_discovery_script:
        return None
    listed, origin = planned_hosts(args)
    hosts.check_process_count(args.num_proc, listed, origin)
    return Job(tuple(listed), args.num_proc, args.ssh_port, args.ssh_identity_file, named,
               "gloo" if args.use_gloo else "mpi" if args.use_mpi else None,
               cpu_only="--no-cuda" in args.command)


def options_of(argv: list[str], command: list[str]) -> list[str]:
    """horovodrun's options as given in `argv`, the `command` left out."""
    return argv[:len(argv) - len(command)]


# How horovodrun's parser can be given the hostfile: its two names, and the
# abbreviations argparse accepts (--hostf and longer; --host is ambiguous).
def is_hostfile_option(word: str) -> bool:
    return word == "-hostfile" or (word.startswith("--hostf") and "--hostfile".startswith(word))


def with_host_list(options: list[str], listed) -> list[str]:
    """horovodrun's options with `-hostfile FILE` (or `--hostfile=FILE`)
    replaced by `-H` and the hosts FILE lists."""
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
    return rewritten


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
    """argv (horovodrun's options, or its whole command line) with the
    project's --blacklist-cooldown-range and --elastic-timeout for an
    elastic run (horovodrun's rule: --host-discovery-script or --min-np),
    each where the user sets none (its options or, for the timeout,
    HOROVOD_ELASTIC_TIMEOUT); others' argv as it is."""
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


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    env = dict(os.environ)
    asked, argv = without_preflight(argv)
    args = parse_horovodrun_args(argv)
    job = job_of(args, argv, env)
    if pipeline.answers_option_check(pipeline.script_of(args.command)):
        pipeline.check_trainer([*args.command, "--check-options"])
    if asked and job is None:
        raise UserError("--preflight checks the hosts of -H or a hostfile; for an elastic run, "
                        "run scripts/preflight.sh on the hosts its discovery lists")
    choice = prepare(job, env, preflight_asked=asked) if job else None
    if choice:
        print(pipeline.network_lines("launch", choice), flush=True)
    options = pipeline.with_nics(options_of(argv, args.command), choice)
    if args.hostfile and job:
        options = with_host_list(options, job.hosts)
    options = with_elastic_defaults(args, options, env)
    horovodrun = starters.horovodrun_path()
    os.environ.update(pipeline.rank_environment("horovodrun", choice, env))
    sys.stdout.flush()
    os.execv(horovodrun, [horovodrun, *options, *args.command])
    return 0  # not reached


def cli() -> None:
    """The command's entry (python -m, through scripts/python.sh)."""
    run_main(lambda: main(sys.argv[1:]), prog="launch")


if __name__ == "__main__":
    cli()
