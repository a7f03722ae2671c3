"""A trainer that starts its own ranks, as Horovod's own examples do with
--num-proc, --hosts and --communication: horovod.run (Horovod's Python
launcher, horovodrun's machinery) starts each rank, which runs the function
it is given (the trainers' main, train.py's run_rank) with the same options
less those three.

    python horovod_train/pytorch_mnist.py --num-proc 2 --communication gloo

The hosts are checked and the network chosen as scripts/launch.sh does it
(launch/prepare.py), HVT_NETWORK_INTERFACE and HVT_PORTS included, before
anything starts. Each rank returns the exit code its error line goes with
(errors.py); the command exits with the worst of them."""

import os
from collections.abc import Callable
from pathlib import Path

from horovod_train.core import config as run_config
from horovod_train.core.console import say
from horovod_train.core.errors import RunFailed
from horovod_train.launch import hosts as host_checks
from horovod_train.launch import pipeline, starters
from horovod_train.launch.job import Job, named_network
from horovod_train.launch.prepare import prepare

REPO = Path(__file__).resolve().parents[2]  # the checkout

# The options of this launch, each with a value, and how they are written.
LAUNCH_OPTIONS = ("--num-proc", "--hosts", "--communication")


def rank_argv(argv: list[str]) -> list[str]:
    """The command line each rank runs: argv less the launch options."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LAUNCH_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in LAUNCH_OPTIONS)):
            kept.append(arg)
    return kept


def start_ranks(prog: str, run_rank: Callable[[list[str]], int], argv: list[str],
                launch: run_config.Launch) -> int:
    """Start launch.num_proc ranks of run_rank(argv less the launch options)
    with horovod.run (which pickles run_rank: a module's function); the worst
    exit code of the ranks."""
    env = dict(os.environ)
    if launch.hosts:
        hosts = host_checks.parse_host_list(launch.hosts, "--hosts")
        host_checks.check_process_count(launch.num_proc, hosts, f"--hosts {launch.hosts}")
    else:
        hosts = [host_checks.Host("localhost", launch.num_proc)]
    # The network named as for launch.sh (HVT_NETWORK_INTERFACE), HVT_PORTS
    # read, and the ranks' environment theirs: horovod.run is horovodrun's
    # machinery, and its ranks inherit this process's environment.
    job = Job(tuple(hosts), launch.num_proc, network=named_network(None, env),
              controller=launch.communication)
    choice = prepare(job, env)
    if choice:
        say(pipeline.network_lines(prog, choice))
    os.environ.update(pipeline.rank_environment("horovodrun", choice, env))
    import horovod

    # Each rank imports the trainer from this checkout, as a rank of
    # horovodrun running the trainer's file does.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    say(f"{prog}: starting {launch.num_proc} ranks through horovod.run "
        f"(hosts {launch.hosts or 'this machine'}, {launch.communication or 'default'} "
        "controller)")
    try:
        codes = horovod.run(run_rank, args=(rank_argv(argv),),
                            **starters.horovod_run_arguments(job, choice))
    except (RuntimeError, ValueError) as err:
        # A rank that ended without returning (killed, or Horovod's own abort).
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise RunFailed(f"horovod.run: {lines[0]}") from None
    return max(codes)

