"""The job, one settings object for every path that starts ranks
(scripts/launch.sh, the Slurm job, scripts/launch_cluster.sh, a trainer's
--num-proc, the preflight), as Horovod's runner keeps one settings object
under its backends: where the ranks run, how the launching host reaches
each host, the network named for them, and how the network probe runs on
every host (ssh, or a Slurm task on each node). A Slurm job's own settings
(its runtime, what its ranks run) are a section of it, SlurmRun.

Standard library only: the Slurm job imports it under a bare python3."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from horovod_train.core import interfaces
from horovod_train.core.errors import UserError
from horovod_train.launch import allocation, hosts, network

# The network probe's part on a host, run from the job's checkout
# (core/interfaces.py, a script that needs the standard library alone).
PROBE_ARGS = ["-m", "horovod_train.core.interfaces", "probe"]


@dataclass(frozen=True)
class SlurmRun:
    """A Slurm job's own settings, read and checked from its HVT_ variables
    by launch/slurm/plan.py: where its ranks' Python runs and what it runs."""
    runtime: str = "venv"  # HVT_RUNTIME: venv (the checkout's .venv), apptainer or pyxis
    image: str | None = None  # HVT_IMAGE: the container runtimes' image
    keys: str | None = None  # HVT_KEYS: the cluster's key directory, horovodrun in a container
    mounts: tuple[str, ...] = ()  # HVT_MOUNTS: SRC:DST[:ro] items, the container runtimes'
    trainer: str | None = None  # HVT_TRAINER; None: the job's command, else the default trainer
    resume: bool = False  # HVT_RESUME: --resume for a script that takes it
    preflight: bool = False  # HVT_PREFLIGHT: the nodes checked before the ranks start

    @property
    def in_container(self) -> bool:
        return self.runtime != "venv"


@dataclass(frozen=True)
class Job:
    hosts: tuple[hosts.Host, ...]  # each host with its slots, the first one's ranks first
    # (none in a Slurm job's settings until its allocation gives them)
    num_proc: int  # ranks to start, at most the slots (0 in a Slurm job's: every task)
    ssh_port: int | None = None  # None: ssh's configuration decides (hosts.py)
    identity: str | None = None  # ssh's -i, where given
    network: tuple[str, ...] = ()  # the network named for the ranks; none: chosen by the probe
    controller: str | None = None  # "gloo", "mpi", or None: horovodrun's default
    cpu_only: bool = False  # the trainer's --no-cuda: GPUs neither checked nor used
    starter: str = "horovodrun"  # what starts the ranks: horovodrun (over ssh) or srun
    allocation: bool = False  # inside a Slurm job: a command on each node is a Slurm task
    checkout: Path = field(default_factory=Path.cwd)  # the job's directory, same path everywhere
    workdir: Path = field(default_factory=Path.cwd)  # where the job writes
    slurm: SlurmRun | None = None  # a Slurm job's own settings; None on every other path

    @property
    def names(self) -> list[str]:
        return [host.name for host in self.hosts]

    @property
    def srun(self) -> bool:
        """The ranks are Slurm tasks: no host needs ssh."""
        return self.starter == "srun"

    @property
    def remote(self) -> bool:
        """More than one host, and one of them not this machine by name:
        the ranks talk over a network the probe must choose."""
        return len(self.hosts) > 1 and not all(hosts.is_local(name) for name in self.names)


def named_network(flag: str | None, env: dict,
                  flag_name: str = "--network-interface") -> tuple[str, ...]:
    """The network the user named: the flag's value or HVT_NETWORK_INTERFACE,
    which mean one thing; a UserError for an item that is neither an
    interface name, HOST:NAME nor a network in CIDR form, or where both are
    given and differ."""
    try:
        from_flag = network.parse_named(flag, flag_name) if flag else []
        from_env = network.parse_named(env.get("HVT_NETWORK_INTERFACE"))
    except ValueError as err:
        raise UserError(str(err)) from None
    if from_flag and from_env and from_flag != from_env:
        raise UserError(f"{flag_name} {','.join(from_flag)} and HVT_NETWORK_INTERFACE="
                        f"{','.join(from_env)} disagree: give one")
    return tuple(from_flag or from_env)


def probe_commands(job: Job) -> list[list[str]]:
    """Each host's part of the network probe (core/interfaces.py). Over ssh
    its source is sent whole, so the host needs no checkout and stdin stays
    free for the probe's plan; its listeners take HVT_PORTS's range."""
    if job.allocation:  # srun's tasks have the job's environment, HVT_PORTS included
        return [allocation.on_each_node(job.names, job.checkout, PROBE_ARGS, stdin=True)]
    ports = os.environ.get("HVT_PORTS")
    return [hosts.python_on(name, job.ssh_port, job.identity,
                            ["-c", interfaces.SOURCE.read_text(), "probe", name],
                            env={"HVT_PORTS": ports} if ports else None)
            for name in job.names]
