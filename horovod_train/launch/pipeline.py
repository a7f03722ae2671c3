"""The steps every way of starting ranks goes through, in one order:

  1. the hosts: where the entry point reads them (-H or a hostfile for
     scripts/launch.sh and scripts/launch_cluster.sh, the allocation for
     the Slurm job), as a Job (job.py);
  2. the input: -np against the slots (hosts.check_process_count), the
     script's options where it answers --check-options (check_trainer;
     answers_option_check), the network's setting (job.py);
  3. the hosts reached as the ranks will be: name, SSH port, ssh login with
     a known host key (check_hosts; nothing for ranks that srun starts);
  4. the preflight, when asked (preflight.run);
  5. the network: the fastest that joins every host, or the named one
     checked (choose_network, launch/network.py's rule);
  6. the ranks' command and environment (with_nics, rank_environment);
  7. run and report: the entry point's own starter (horovodrun, srun, the
     image's containers).

Steps 3 to 5 are one function for every entry point: launch/prepare.py.

One error convention for all of them (core/errors.py): bad input (options,
hosts, a missing key, an unknown host key, a setting that does not parse)
is one line `PROGRAM: error: ...` and exit 2; a run that fails (the network
probe, a preflight culprit, the ranks) says its lines and exits 1. The same
fault gives the same words from every entry point.

Standard library only: the Slurm job imports it under a bare python3."""

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from horovod_train.core import interfaces
from horovod_train.core.errors import RunFailed, UserError, exit_code
from horovod_train.launch import hosts, network, openmpi
from horovod_train.launch.job import Job, named_network, probe_commands

T = TypeVar("T")

TRAINER_CHECK_TIMEOUT_S = 600  # Pyxis may pull the image first


# The line a script carries (among its first MARK_LINES) to say it takes the
# project's trainers' contract: --check-options checks its options and ends
# (exit 0, or the one line `PROG: error: ...` and exit 2) without starting
# Horovod, and --resume continues from its last checkpoint. The project's
# trainers carry it; any other script is run as it is (docs/your-script.md).
OPTION_CHECK_MARK = "# horovod-train: answers --check-options"
MARK_LINES = 5
# Python's own flags a command may give before its script (none takes a value).
PYTHON_FLAGS = ("-u", "-B", "-O", "-OO")


def is_python(word: str) -> bool:
    """Whether a command's first word runs Python: python, python3,
    python3.11, by any path."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", Path(word).name) is not None


def script_of(command: list[str]) -> str | None:
    """The script a command runs by path (PYTHON [FLAGS] SCRIPT ARGS...), or
    None: another program, a module (-m) or code (-c)."""
    if not command or not is_python(command[0]):
        return None
    script = next((word for word in command[1:] if word not in PYTHON_FLAGS), None)
    return script if script and not script.startswith("-") else None


def answers_option_check(script: str | Path | None, cwd: str | Path | None = None) -> bool:
    """Whether `script` (relative to `cwd`) carries OPTION_CHECK_MARK: only
    such a script is asked --check-options. A file that cannot be read is
    not asked (its own run says what is wrong)."""
    if script is None:
        return False
    try:
        with open(Path(cwd or ".") / script, encoding="utf-8", errors="replace") as file:
            head = [file.readline() for _ in range(MARK_LINES)]
    except OSError:
        return False
    return any(line.strip() == OPTION_CHECK_MARK for line in head)


def check_trainer(check: list[str], cwd: str | Path | None = None) -> dict:
    """The trainer's own verdict on its options (`check`: the trainer's
    command with --check-options, as the job runs it), asked once before
    any rank starts, where each rank would print it; the run's
    configuration it read. A bad option is the trainer's line as a
    UserError, its own `PROG: error:` dropped for the entry point's."""
    try:
        result = subprocess.run(check, cwd=cwd, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=TRAINER_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"the trainer's option check did not end in {TRAINER_CHECK_TIMEOUT_S} "
                        f"s: {shlex.join(check)}") from None
    except OSError as err:
        raise UserError(f"cannot run the trainer ({check[0]}): {err.strerror or err}") from None
    said = [line for line in result.stderr.splitlines()
            if line.strip() and not line.startswith("srun:")]
    if result.returncode != 0:
        if not said:
            raise UserError(f"the trainer's option check exited {result.returncode}: "
                            f"{shlex.join(check)}")
        prog, marker, message = said[-1].partition(": error: ")
        raise UserError(f"{prog}: {message}" if marker else said[-1])
    return configuration_of(result.stdout)


def configuration_of(stdout: str) -> dict:
    """The run's configuration an option check printed as its last line (the
    project's trainers print it as JSON); {} where it printed none."""
    lines = stdout.strip().splitlines()
    try:
        config = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {}
    return config if isinstance(config, dict) else {}


# The hosts this process has found reachable, each as (name, ssh port,
# identity): a trainer's --num-proc checks its hosts before horovod.run,
# whose own ssh check (horovodrun_hosts, in the same process) then skips
# them instead of logging in to each a second time.
checked_hosts: set[tuple[str, int | None, str | None]] = set()


def check_hosts(job: Job) -> None:
    """Every host reachable as horovodrun reaches it (name, SSH port, ssh
    login in BatchMode with a known host key), side by side; the first
    problem is a UserError. Ranks that srun starts need no ssh."""
    if not job.srun:
        hosts.check_reachable(job.names, job.ssh_port, job.identity)
        checked_hosts.update((name, job.ssh_port, job.identity) for name in job.names)


def choose_network(job: Job, env: dict, layers: dict[str, str] | None = None
                   ) -> network.Choice | None:
    """The network the ranks use: the fastest that joins every host, or the
    named one checked, by the probe on every host; the `layers`' own
    interface variables checked as each layer reads them. None where every
    host is this machine (loopback). What cannot carry the job ends it (a
    RunFailed: the probe ran and said no)."""
    ports_of(env)  # a bad range is bad input, before the probe uses it
    if not job.remote:
        return None
    try:
        timeouts = network.ProbeTimeouts.from_env(env)
    except ValueError as err:
        raise UserError(str(err)) from None
    choice = probe_network(job, layers, timeouts)
    problem = mpi_problem(job, choice)
    if problem:
        raise RunFailed(problem)
    return choice


def probe_network(job: Job, layers: dict[str, str] | None, timeouts: network.ProbeTimeouts,
                  then=None) -> network.Choice:
    """The probe's choice on the job's hosts (network.choose), its failures
    a RunFailed each; `then` goes on with the probe's processes (the
    preflight's pairs and clocks)."""
    try:
        return network.choose(probe_commands(job), job.names, list(job.network) or None,
                              layers, timeouts, then)
    except network.NoSharedInterface as err:
        # Naming a network cannot get past a firewall.
        raise RunFailed(str(err) if err.firewall else f"{err} (HVT_NETWORK_INTERFACE names one)") \
            from None
    except (ValueError, RuntimeError) as err:
        raise RunFailed(str(err)) from None


def mpi_problem(job: Job, choice: network.Choice) -> str | None:
    """Why the chosen network cannot carry the job's MPI (asked for, or
    horovodrun's and srun's default), or None: Gloo runs are not held to it."""
    return network.second_address_problem(choice) if job.controller != "gloo" else None


def network_lines(prog: str, choice: network.Choice) -> str:
    """A run's first line: the network, and why each other was left out."""
    return "; ".join([f"{prog}: network {choice.said}", *choice.left_out])


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


def with_nics(options: list[str], choice: network.Choice | None) -> list[str]:
    """horovodrun's options with the chosen network as its
    --network-interfaces, in place of any the user gave (horovodrun then
    probes nothing itself); as they are where there is no choice."""
    if choice is None:
        return options
    dropped = {index + word for index, words, _ in nic_options(options)
               for word in range(words)}
    kept = [word for index, word in enumerate(options) if index not in dropped]
    return ["--network-interfaces", choice.horovodrun_nics, *kept]


def ports_of(env: dict) -> tuple[int, int] | None:
    """HVT_PORTS's range; a UserError for a bad one."""
    try:
        return interfaces.port_range(env.get("HVT_PORTS"))
    except ValueError as err:
        raise UserError(str(err)) from None


def port_environment(ports: tuple[int, int] | None, env: dict) -> dict[str, str]:
    """Open MPI's ports inside HVT_PORTS (Horovod's own and Gloo's read it
    themselves, in the project's Horovod; the probe's listeners too), where
    the user set none of Open MPI's."""
    if ports is None:
        return {}
    return {name: value for name, value in openmpi.port_range_environment(*ports).items()
            if name not in env}


def rank_environment(starter: str, choice: network.Choice | None,
                     env: dict) -> dict[str, str]:
    """What the ranks' environment adds to `env`: the project's Open MPI
    settings and its ports inside HVT_PORTS, where the user set none; for
    ranks that srun starts (no mpirun), also what horovodrun's mpirun would
    give them and the chosen network, where neither the user nor the site's
    files set them, and Slurm's PMIx kept off ports of its own in a range."""
    port_range = ports_of(env)
    ports = port_environment(port_range, env)
    if starter == "srun":
        # Slurm's PMIx servers connect to each other on ports of their own,
        # outside any range; inside one they go through slurmd's port, which
        # a site that runs Slurm has open.
        pmix = {"SLURM_PMIX_DIRECT_CONN": "false"} \
            if ports and "SLURM_PMIX_DIRECT_CONN" not in env else {}
        through_slurmd = {**env, **pmix}.get("SLURM_PMIX_DIRECT_CONN") == "false"
        barrier = start_barrier_environment(choice, port_range) if through_slurmd else {}
        return {**ports, **pmix, **barrier,
                **openmpi.srun_rank_environment(env, choice.cidrs if choice else None)}
    return {**ports, **{name: value for name, value in openmpi.project_environment().items()
                        if name not in env}}


def start_barrier_environment(choice: network.Choice | None,
                              ports: tuple[int, int] | None) -> dict[str, str]:
    """HVT_START_BARRIER for srun's ranks whose PMIx servers meet through
    slurmd, where Open MPI's start has no barrier across nodes
    (core/start_barrier.py): the first node's address on the chosen network
    and the last port of HVT_PORTS (Open MPI's ranks leave it free), with a
    new secret of the job's (HVT_START_BARRIER_TOKEN) that only its ranks
    know. None on one node, or without a range (where a site turned direct
    connections off itself: set HVT_PORTS)."""
    if choice is None or ports is None:
        return {}
    addresses = [iface.ip for iface in choice.networks[0].members.values() if iface and iface.ip]
    if len(addresses) < 2:
        return {}
    return {"HVT_START_BARRIER": f"{addresses[0]}:{ports[1]}",
            "HVT_START_BARRIER_TOKEN": secrets.token_hex(16)}


def literal_controller(argv: list[str], env: dict) -> str | None:
    """The controller of the literal horovodrun, read from its command line:
    --gloo, --mpi, or an elastic run (Gloo alone); None where horovodrun
    decides (MPI where it has it). The trainers take none of these words."""
    words = set(argv[1:])
    if "--gloo" in words or env.get("HOROVOD_CONTROLLER") == "gloo" or \
            words & {"--host-discovery-script", "--min-np", "--max-np"}:
        return "gloo"
    return "mpi" if "--mpi" in words else None


def literal_job(host_names: list[str], ssh_port: int | None, identity: str | None,
                env: dict) -> Job:
    """The literal horovodrun's hosts as a Job (a slot each: its hooks check
    hosts and networks, not slots), the network named as launch.sh reads it,
    the controller its command line gives."""
    return Job(tuple(hosts.Host(name, 1) for name in host_names), len(host_names), ssh_port,
               identity, named_network(None, env), literal_controller(sys.argv, env))


def as_horovodrun(step: Callable[[], T]) -> T:
    """`step`'s result, run as a hook inside the literal horovodrun: an error
    is its one line and horovodrun's exit with the convention's code
    (horovodrun has no convention of its own)."""
    done: list[T] = []
    code = exit_code(lambda: done.append(step()), "horovodrun")
    if code:
        raise SystemExit(code)
    return done[0]


def horovodrun_hosts(host_names: list[str], ssh_port: int | None,
                     identity: str | None) -> None:
    """The literal horovodrun's host check (its ssh check's hook in the
    project's Horovod: docker/env/patches/*-network-from-the-platform.patch):
    check_hosts, as launch.sh checks them, every launch; a host it cannot
    use is one line and exit 2, within hosts.check_deadline_s, where upstream's
    check tries ssh five times and ends in a traceback (over a path that
    loses full-size packets, after minutes). Hosts this process checked
    already (a trainer's --num-proc, before horovod.run) are not checked
    again."""
    unchecked = [name for name in host_names
                 if (name, ssh_port, identity) not in checked_hosts]
    if unchecked:
        env = dict(os.environ)
        as_horovodrun(lambda: check_hosts(literal_job(unchecked, ssh_port, identity, env)))


def horovodrun_network(host_names: list[str], ssh_port: int | None,
                       identity: str | None) -> list[str] | None:
    """The literal horovodrun's network (its probe's hook in the project's
    Horovod: docker/env/patches/*-network-from-the-platform.patch): this
    module's choice for its hosts, afresh at every launch, as its
    --network-interfaces; its first line said as launch.sh says it; a
    network that cannot carry the job one line and exit 1. None where the
    hosts need no network."""
    env = dict(os.environ)
    choice = as_horovodrun(
        lambda: choose_network(literal_job(host_names, ssh_port, identity, env), env))
    # horovodrun's mpirun reads its environment after this hook.
    for name, value in port_environment(ports_of(env), env).items():
        os.environ.setdefault(name, value)
    if choice is None:
        return None
    print(network_lines("horovodrun", choice), flush=True)
    return choice.horovodrun_nics.split(",")
