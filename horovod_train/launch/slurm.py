"""Horovod on a Slurm allocation. scripts/slurm/horovod.sbatch runs this in
the batch step, and so do the jobs of scripts/slurm/submit.sh: one recipe for
both.

    scripts/python.sh -m horovod_train slurm-job run [-- TRAINER OPTIONS...]

By default every rank is a task of the job, started by srun, and Horovod
starts over MPI through Slurm's PMIx: Slurm tracks, binds, accounts for and
ends the ranks itself, and no node needs ssh to another. A job of 2 nodes
with 2 tasks each (SLURM_JOB_NODELIST=a,b, SLURM_TASKS_PER_NODE=2(x2)) runs,
in turn:

    srun --ntasks 1 ... python TRAINER OPTIONS... --check-options
                                       the trainer's options, checked once
    srun --ntasks-per-node 1 ... python -m horovod_train.core.interfaces probe
                                       the network every node reaches every
                                       other on (launch/network.py)
    srun --mpi=pmix --ntasks=4 ... python TRAINER OPTIONS...
                                       the ranks, with that network handed
                                       to Open MPI (in CIDR form) and to each
                                       rank, which names its own interface on
                                       it to NCCL and Gloo

HVT_LAUNCHER=horovodrun runs `horovodrun -np 4 -H a:2,b:2 --gloo` from the
first node instead, its ranks on the other nodes started over ssh: for
elastic runs (--elastic), which Horovod's own driver starts and restarts.

Settings, from the environment (`sbatch --export`, or exported before sbatch):

    HVT_LAUNCHER      srun (default): the ranks are Slurm tasks;
                      horovodrun: horovodrun over ssh from the first node
    HVT_NETWORK_INTERFACE
                      the network(s) the ranks use: interface names (eth0,
                      or ib0,eth0), each node's own (a:eth0,b:ens5), or a
                      network in CIDR form (10.0.0.0/24; srun only), checked
                      on every node first; default: chosen by the probe
                      (srun), or by horovodrun's own probe
    HVT_NUM_PROC      ranks to start (default: every task of the job)
    HVT_RUNTIME   venv (default): the checkout's .venv on every node;
                      apptainer: `apptainer exec` of HVT_IMAGE (a .sif file
                      or docker://...); pyxis: `srun --container-image` of
                      HVT_IMAGE (an enroot URI or a .sqsh file)
    HVT_IMAGE     the image, for apptainer and pyxis
    HVT_MOUNTS    apptainer and pyxis: more binds, SRC:DST[:ro],... (data, outputs)
    HVT_TRAINER   the entry script (default horovod_train/pytorch_mnist.py)
    HVT_TRAIN_DIR the checkout (default: the job's working directory); venv:
                      its .venv runs; apptainer and pyxis: mounted at /workspace,
                      the image's working directory (the image holds no code)
    HVT_RESUME=1          add --resume: continue from the trainer's checkpoint. A
                      job that Slurm requeued (SLURM_RESTART_COUNT > 0) resumes
                      without it.
    HVT_DRY_RUN=1 print the commands instead of running them
  HVT_LAUNCHER=horovodrun only:
    HVT_KEYS      apptainer and pyxis: the cluster's key directory
                      (scripts/cluster_keys.sh), mounted read-only at
                      /etc/horovod/keys, where the image's sshd takes its keys
    HVT_SSH_PORT  the port horovodrun's ssh uses (the image's sshd: 12345,
                      the default with containers; venv: ssh_config's, unless set)

With horovodrun and a container runtime every node runs the image's
entrypoint, which starts its sshd on HVT_SSH_PORT with the cluster's
key: on the other nodes as a job step that lasts the job, on the first node
around horovodrun, whose ssh then lands in the other nodes' containers.

Standard library only: sites that run the image may have no venv on the
nodes, only a python3.
"""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.core.slurm_tasks import expand_tasks_per_node
from horovod_train.launch import horovodrun, network
from horovod_train.launch.hosts import (
    IMAGE_SSH_PORT,
    Host,
    SshTarget,
    host_list,
    probe_ssh_port,
    total_slots,
)

LAUNCHERS = ("srun", "horovodrun")
RUNTIMES = ("venv", "apptainer", "pyxis")
DEFAULT_TRAINER = "horovod_train/pytorch_mnist.py"
# The image's layout (docker/Dockerfile): its venv, trainers and entrypoint;
# its sshd port is hosts.IMAGE_SSH_PORT.
IMAGE_WORKDIR = "/workspace"
IMAGE_PYTHON = "/opt/venv/bin/python"
IMAGE_HOROVODRUN = "/opt/venv/bin/horovodrun"
IMAGE_ENTRYPOINT = "/usr/local/bin/entrypoint.sh"
IMAGE_KEYS = "/etc/horovod/keys"
SSHD_WAIT_S = 600  # the other nodes' containers: pulling an image can take minutes
STOP_GRACE_S = 20  # horovodrun's (or srun's) time to stop its ranks before it is killed
CHECK_TIMEOUT_S = 600  # the trainer's option check: Pyxis may pull the image first

MOUNT_ITEM = re.compile(r"^([^:,]+):(/[^:,]*)(:ro)?$")
# --- the allocation -------------------------------------------------------------

def node_hostnames(nodelist: str) -> list[str]:
    """The nodes of SLURM_JOB_NODELIST. A plain list is split here; a
    compressed one ('node[01-04],gpu7') is expanded by Slurm itself,
    `scontrol show hostnames`."""
    if "[" not in nodelist:
        return [name.strip() for name in nodelist.split(",") if name.strip()]
    try:
        result = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                                capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UserError(f"scontrol not found: it expands SLURM_JOB_NODELIST={nodelist}") from None
    names = result.stdout.split()
    if result.returncode != 0 or not names:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise UserError(f"scontrol show hostnames {nodelist}: {detail}")
    return names


@dataclass(frozen=True)
class Allocation:
    job_id: str
    hosts: tuple[Host, ...]  # each node with its tasks as slots, in Slurm's order
    restarts: int  # times Slurm requeued and restarted this job
    cpus_per_task: int | None = None  # sbatch --cpus-per-task, which srun does not inherit

    @property
    def num_proc(self) -> int:
        return total_slots(self.hosts)

    @property
    def host_list(self) -> str:
        return host_list(self.hosts)

    @property
    def nodes(self) -> list[str]:
        return [host.name for host in self.hosts]


def allocation_from_env(env: dict, hostnames=node_hostnames) -> Allocation:
    """The job's nodes (SLURM_JOB_NODELIST) with its tasks per node
    (SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE) as Horovod slots."""
    job_id = env.get("SLURM_JOB_ID", "")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
    if not job_id or not nodelist:
        raise UserError("not inside a Slurm job (SLURM_JOB_ID and SLURM_JOB_NODELIST are "
                        "unset): submit it, e.g. sbatch scripts/slurm/horovod.sbatch")
    names = hostnames(nodelist)
    if env.get("SLURM_TASKS_PER_NODE"):
        tasks = expand_tasks_per_node(env["SLURM_TASKS_PER_NODE"])
        origin = f"SLURM_TASKS_PER_NODE={env['SLURM_TASKS_PER_NODE']}"
    elif env.get("SLURM_NTASKS_PER_NODE"):
        tasks = expand_tasks_per_node(env["SLURM_NTASKS_PER_NODE"]) * len(names)
        origin = f"SLURM_NTASKS_PER_NODE={env['SLURM_NTASKS_PER_NODE']}"
    else:
        raise UserError("the job has no tasks per node (SLURM_TASKS_PER_NODE is unset): "
                        "submit with --ntasks-per-node, one task per Horovod rank")
    if len(tasks) != len(names):
        raise UserError(f"{origin} counts {len(tasks)} nodes, but "
                        f"SLURM_JOB_NODELIST={nodelist} has {len(names)}")
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    nodes = tuple(Host(name, count) for name, count in zip(names, tasks, strict=True))
    return Allocation(job_id, nodes, int(restarts) if restarts.isdigit() else 0,
                      int(cpus) if cpus.isdigit() else None)


# --- the settings ---------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    launcher: str  # srun: the ranks are Slurm tasks; horovodrun: over ssh from node 1
    runtime: str
    image: str | None
    keys: str | None
    mounts: tuple[str, ...]
    ssh_port: int | None
    trainer: str
    resume: bool
    checkout: Path
    interfaces: tuple[str, ...] = ()  # HVT_NETWORK_INTERFACE's items, checked; none: chosen
    num_proc: int | None = None  # None: every task of the job
    preflight: bool = False  # HVT_PREFLIGHT: the nodes checked before the ranks start


def parse_flag(name: str, text: str | None) -> bool:
    value = (text or "").strip().lower()
    if value in ("", "0", "no", "false"):
        return False
    if value in ("1", "yes", "true"):
        return True
    raise UserError(f"{name}={text}: want 1 or 0")


def make_settings(launcher: str = "srun", runtime: str = "venv", image: str | None = None,
                  keys: str | None = None, mounts: str | None = None,
                  ssh_port: str | int | None = None, trainer: str | None = None,
                  resume: bool = False, checkout: str | Path | None = None,
                  interfaces: str | None = None, num_proc: str | int | None = None,
                  preflight: bool = False) -> Settings:
    """Checked settings; every problem is one UserError naming the variable."""
    if launcher not in LAUNCHERS:
        raise UserError(f"HVT_LAUNCHER={launcher}: unknown launcher; use one of "
                        f"{', '.join(LAUNCHERS)}")
    if runtime not in RUNTIMES:
        raise UserError(f"HVT_RUNTIME={runtime}: unknown runtime; use one of "
                        f"{', '.join(RUNTIMES)}")
    container = runtime != "venv"
    over_ssh = launcher == "horovodrun"
    if container and not image:
        raise UserError(f"HVT_RUNTIME={runtime} needs HVT_IMAGE, the image to run")
    ssh_only = [name for name, value in (("HVT_KEYS", keys), ("HVT_SSH_PORT", ssh_port))
                if value not in (None, "")]
    if ssh_only and not over_ssh:
        raise UserError(f"{' and '.join(ssh_only)} {'is' if len(ssh_only) == 1 else 'are'} for "
                        "HVT_LAUNCHER=horovodrun: srun starts the ranks without ssh")
    if over_ssh and container and not keys:
        raise UserError(f"HVT_RUNTIME={runtime} needs HVT_KEYS, the cluster's key "
                        "directory (scripts/cluster_keys.sh): the image's sshd takes its keys "
                        f"from it at {IMAGE_KEYS}")
    if keys and not Path(keys, "authorized_keys").is_file():
        raise UserError(f"HVT_KEYS={keys} has no authorized_keys "
                        "(make the directory with scripts/cluster_keys.sh)")
    mount_list = tuple(m.strip() for m in (mounts or "").split(",") if m.strip())
    for mount in mount_list:
        if not MOUNT_ITEM.match(mount):
            raise UserError(f"HVT_MOUNTS: {mount!r} is not SRC:DST or SRC:DST:ro "
                            "(DST absolute)")
    if mount_list and not container:
        raise UserError("HVT_MOUNTS is for the container runtimes; the venv sees every path")
    port = None
    if ssh_port not in (None, ""):
        if not str(ssh_port).isdigit() or not 1 <= int(ssh_port) <= 65535:
            raise UserError(f"HVT_SSH_PORT={ssh_port}: want a port number")
        port = int(ssh_port)
    elif container and over_ssh:
        port = IMAGE_SSH_PORT
    try:
        names = tuple(network.parse_named(interfaces))
    except ValueError as err:
        raise UserError(str(err)) from None
    ranks = None
    if num_proc not in (None, ""):
        if not str(num_proc).isdigit() or int(num_proc) < 1:
            raise UserError(f"HVT_NUM_PROC={num_proc}: want a number of ranks, at least 1")
        ranks = int(num_proc)
    checkout = Path(checkout or os.getcwd()).resolve()
    horovodrun = checkout / ".venv" / "bin" / "horovodrun"
    if not container and not horovodrun.exists():
        raise UserError(f"no {horovodrun}: run scripts/setup.sh in the checkout, and submit "
                        "from it (or set HVT_TRAIN_DIR)")
    if preflight and container:
        raise UserError(f"HVT_PREFLIGHT=1 checks nodes that run the checkout's .venv; with "
                        f"HVT_RUNTIME={runtime}, run scripts/preflight.sh in the image instead")
    return Settings(launcher, runtime, image or None,
                    str(Path(keys).resolve()) if keys else None, mount_list, port,
                    trainer or DEFAULT_TRAINER, resume, checkout, names, ranks, preflight)


def settings_from_env(env: dict) -> Settings:
    return make_settings(launcher=env.get("HVT_LAUNCHER") or "srun",
                         runtime=env.get("HVT_RUNTIME") or "venv",
                         image=env.get("HVT_IMAGE"), keys=env.get("HVT_KEYS"),
                         mounts=env.get("HVT_MOUNTS"), ssh_port=env.get("HVT_SSH_PORT"),
                         trainer=env.get("HVT_TRAINER"),
                         resume=parse_flag("HVT_RESUME", env.get("HVT_RESUME")),
                         checkout=env.get("HVT_TRAIN_DIR"),
                         interfaces=env.get("HVT_NETWORK_INTERFACE"),
                         num_proc=env.get("HVT_NUM_PROC"),
                         preflight=parse_flag("HVT_PREFLIGHT", env.get("HVT_PREFLIGHT")))


# --- the commands ---------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What the job runs, in order: `check`, the trainer's options, in one
    task; `probe`, the network, in a task per node; then `main`, the ranks.
    With horovodrun, a container runtime and more than one node, `sshd` on
    the other nodes first, for as long as `main` runs."""
    main: list[str]
    check: list[str]
    cwd: str | None
    probe: list[str]
    sshd: list[str] | None = None
    ssh_hosts: tuple[str, ...] = ()
    ssh_port: int | None = None


def trainer_arguments(trainer_args: list[str], settings: Settings,
                      allocation: Allocation) -> list[str]:
    """The trainer's options, with --resume when asked for (HVT_RESUME=1) or when
    Slurm restarted this job after a requeue."""
    resume = settings.resume or allocation.restarts > 0
    return [*trainer_args, *(["--resume"] if resume and "--resume" not in trainer_args else [])]


def rank_count(allocation: Allocation, settings: Settings) -> int:
    if settings.num_proc and settings.num_proc > allocation.num_proc:
        raise UserError(f"HVT_NUM_PROC={settings.num_proc} is more than the "
                        f"{allocation.num_proc} tasks of job {allocation.job_id} "
                        f"({allocation.host_list}): lower it, or submit with more tasks")
    return settings.num_proc or allocation.num_proc


def horovodrun_options(allocation: Allocation, settings: Settings) -> list[str]:
    port = ["-p", str(settings.ssh_port)] if settings.ssh_port else []
    return ["-np", str(rank_count(allocation, settings)), "-H", allocation.host_list, *port,
            "--gloo"]


def with_nics(argv: list[str], nics: str) -> list[str]:
    """horovodrun's command with the probe's choice (horovodrun then skips
    its own probe, which takes names only and does not time networks)."""
    at = next(i for i, word in enumerate(argv) if word.endswith("horovodrun")) + 1
    return [*argv[:at], "--network-interfaces", nics, *argv[at:]]


def apptainer_exec(settings: Settings, mounts: list[str], environment: dict | None = None,
                   sshd: bool = False) -> list[str]:
    # --nv: the node's NVIDIA driver and GPUs in the container. With sshd,
    # --fakeroot --writable-tmpfs: the entrypoint writes root's ssh files and
    # a host key, and sshd runs as root, inside the container only.
    return ["apptainer", "exec", "--nv", *(["--fakeroot", "--writable-tmpfs"] if sshd else []),
            "--pwd", IMAGE_WORKDIR, *[flag for mount in mounts for flag in ("--bind", mount)],
            *[flag for name, value in (environment or {}).items()
              for flag in ("--env", f"{name}={value}")],
            settings.image]


def pyxis_options(settings: Settings, mounts: list[str], environment: dict | None = None,
                  sshd: bool = False) -> list[str]:
    # srun's --container-* options; entrypoints are not run unless asked.
    return [f"--container-image={settings.image}", f"--container-mounts={','.join(mounts)}",
            f"--container-workdir={IMAGE_WORKDIR}",
            *(["--container-remap-root", "--container-writable"] if sshd else []),
            *(["--export=ALL," + ",".join(f"{k}={v}" for k, v in environment.items())]
              if environment else [])]


def srun_in_runtime(settings: Settings, srun_options: list[str], argv: list[str]) -> list[str]:
    """srun SRUN_OPTIONS, its tasks running argv in the job's runtime: the
    checkout's venv, or the image with the checkout at /workspace."""
    mounts = [f"{settings.checkout}:{IMAGE_WORKDIR}", *settings.mounts]
    if settings.runtime == "apptainer":
        return ["srun", *srun_options, *apptainer_exec(settings, mounts), *argv]
    if settings.runtime == "pyxis":
        return ["srun", *srun_options, *pyxis_options(settings, mounts), *argv]
    return ["srun", *srun_options, *argv]


def probe_step(nodes: list[str], checkout: Path) -> list[str]:
    """The network probe, a task on each node. Outside any container: the
    batch step's Python (the venv's, at the same path on every node, or
    python3), the checkout's module."""
    return ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            "--mpi=none", "--input=all", f"--chdir={checkout}", sys.executable, "-m",
            "horovod_train.core.interfaces", "probe"]


def make_plan(allocation: Allocation, settings: Settings, trainer_args: list[str]) -> Plan:
    args = trainer_arguments(trainer_args, settings, allocation)
    container = settings.runtime != "venv"
    python = IMAGE_PYTHON if container else str(settings.checkout / ".venv" / "bin" / "python")
    cwd = None if container else str(settings.checkout)
    check = srun_in_runtime(settings, ["--nodes=1", "--ntasks=1", "--mpi=none"],
                            [python, settings.trainer, *args, "--check-options"])
    probe = probe_step(allocation.nodes, settings.checkout)
    if settings.launcher == "srun":
        ranks = ["--mpi=pmix", "--kill-on-bad-exit=1",
                 f"--ntasks={rank_count(allocation, settings)}",
                 *([f"--cpus-per-task={allocation.cpus_per_task}"]
                   if allocation.cpus_per_task else [])]
        return Plan(srun_in_runtime(settings, ranks, [python, settings.trainer, *args]),
                    check, cwd, probe)

    options = horovodrun_options(allocation, settings)
    if not container:
        venv = settings.checkout / ".venv" / "bin"
        return Plan([str(venv / "horovodrun"), *options, python, settings.trainer, *args],
                    check, cwd, probe)

    first, others = allocation.nodes[0], allocation.nodes[1:]
    environment = {"HVT_CLUSTER_HOSTS": " ".join(allocation.nodes),
                   "HVT_SSH_PORT": str(settings.ssh_port)}
    mounts = [f"{settings.keys}:{IMAGE_KEYS}:ro", f"{settings.checkout}:{IMAGE_WORKDIR}",
              *settings.mounts]
    training = [IMAGE_ENTRYPOINT, IMAGE_HOROVODRUN, *options, python, settings.trainer, *args]
    keep_sshd = [IMAGE_ENTRYPOINT, "sleep", "infinity"]
    # One task on each other node, for the job's length; no --exact, so the
    # step keeps the job's CPUs there for the ranks its sshd starts.
    other_nodes = ["srun", f"--nodes={len(others)}", f"--ntasks={len(others)}",
                   "--ntasks-per-node=1", f"--nodelist={','.join(others)}"]
    if settings.runtime == "apptainer":
        container_argv = apptainer_exec(settings, mounts, environment, sshd=True)
        main = [*container_argv, *training]
        sshd = [*other_nodes, *container_argv, *keep_sshd]
    else:
        options = pyxis_options(settings, mounts, environment, sshd=True)
        main = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={first}", *options, *training]
        sshd = [*other_nodes, *options, *keep_sshd]
    if not others:
        return Plan(main, check, cwd, probe)
    return Plan(main, check, cwd, probe, sshd, tuple(others), settings.ssh_port)


# --- before the ranks start -----------------------------------------------------

def mpi_plugins(listing: str) -> list[str]:
    """The plugin names `srun --mpi=list` prints, one an indented line."""
    return [line.strip() for line in listing.splitlines()
            if line[:1] in ("\t", " ") and line.strip()]


def check_pmix() -> None:
    """srun can start the ranks' Open MPI: Slurm has its PMIx plugin. (Open
    MPI 4.1 as Debian builds it has no PMI-1 or PMI-2 client, so pmi2 would
    not do.)"""
    try:
        result = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True,
                                timeout=60)
    except FileNotFoundError:
        raise UserError("srun not found: the job's nodes need Slurm's client commands") from None
    plugins = mpi_plugins(result.stdout + result.stderr)
    if "pmix" not in plugins:
        raise UserError(f"srun offers no PMIx plugin (srun --mpi=list: "
                        f"{', '.join(plugins) or 'nothing'}): the ranks' Open MPI starts "
                        "through PMIx; ask the site for Slurm's mpi/pmix, or set "
                        "HVT_LAUNCHER=horovodrun")


def check_trainer_options(plan: Plan, settings: Settings) -> dict:
    """The trainer's own verdict on its options, given once (the ranks would
    each print it), and the clashes with the launcher; returns the run
    configuration the trainer read."""
    try:
        result = subprocess.run(plan.check, cwd=plan.cwd, capture_output=True, text=True,
                                timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"the trainer's option check did not end in {CHECK_TIMEOUT_S} s: "
                        f"{shlex.join(plan.check)}") from None
    said = [line for line in result.stderr.splitlines()
            if line.strip() and not line.startswith("srun:")]
    if result.returncode != 0:
        raise UserError(said[-1] if said else f"the trainer's option check exited "
                        f"{result.returncode}: {shlex.join(plan.check)}")
    config = json.loads(result.stdout.strip().splitlines()[-1])
    if settings.launcher == "srun" and config.get("elastic"):
        raise UserError("--elastic needs HVT_LAUNCHER=horovodrun: Horovod's elastic driver "
                        "starts and replaces the ranks itself")
    if settings.launcher == "horovodrun" and config.get("use_adasum"):
        raise UserError("--use-adasum needs MPI, and HVT_LAUNCHER=horovodrun runs Gloo: leave "
                        "HVT_LAUNCHER unset, and srun starts the ranks over MPI")
    return config


def choose_network(plan: Plan, allocation: Allocation, settings: Settings,
                   layers: dict[str, str], env: dict) -> network.Choice:
    try:
        return network.choose([plan.probe], allocation.nodes, list(settings.interfaces) or None,
                              layers, network.ProbeTimeouts.from_env(env))
    except network.NoSharedInterface as err:
        raise UserError(f"{err} (HVT_NETWORK_INTERFACE names one)") from None
    except ValueError as err:
        raise UserError(str(err)) from None
    except RuntimeError as err:
        raise RunFailed(str(err)) from None


# Each layer that carries the ranks' traffic, and its own variables.
NETWORK_VARIABLES = {
    "HOROVOD_GLOO_IFACE": (),  # Gloo (one interface)
    "NCCL_SOCKET_IFNAME": (),  # NCCL's sockets (and its bootstrap)
    "OMPI_MCA_btl_tcp_if_include": ("OMPI_MCA_btl_tcp_if_exclude",),  # Open MPI's transport
    "OMPI_MCA_oob_tcp_if_include": ("OMPI_MCA_oob_tcp_if_exclude",),  # and its out-of-band
}


def layers_set(env: dict) -> dict[str, str]:
    """The layers' own interface variables the user set (exclude lists aside)."""
    return {name: env[name] for name in NETWORK_VARIABLES if name in env}


# Open MPI's, which take networks in CIDR form, the same on every node
# whatever the interfaces are called there. Gloo and NCCL take names: each
# rank finds its own host's on HVT_NETWORKS (core/runtime.py).
CIDR_VARIABLES = ("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")


def srun_rank_environment(choice: network.Choice, env: dict) -> dict[str, str]:
    """What srun's ranks get: the chosen networks (HVT_NETWORKS, and Open
    MPI's variables, but one whose own variable the user or the site's
    parameter files set keeps it: an exclude list too, Open MPI refuses
    both), and the Open MPI settings horovodrun's ranks get."""
    cidrs = ",".join(choice.cidrs)
    chosen = {"HVT_NETWORKS": cidrs, **horovodrun.rank_mpi_environment(env)}
    site = {f"OMPI_MCA_{name}" for name in horovodrun.site_mca_settings(env)}
    for name in CIDR_VARIABLES:
        if not any(var in env or var in site for var in (name, *NETWORK_VARIABLES[name])):
            chosen[name] = cidrs
    return chosen


# --- running --------------------------------------------------------------------

def ssh_answers(host: str, port: int) -> bool:
    """True when host:port greets like an SSH server (the launcher's probe)."""
    return probe_ssh_port(host, SshTarget(host, port, proxied=False)) is None


def wait_for_sshd(hosts: tuple[str, ...], port: int, step: subprocess.Popen,
                  timeout_s: float = SSHD_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = list(hosts)
    while waiting:
        if step.poll() is not None:
            raise RunFailed(f"the containers' sshd step ended (exit {step.returncode}) before "
                            f"{', '.join(waiting)} answered on port {port}; see its output above")
        waiting = [host for host in waiting if not ssh_answers(host, port)]
        if waiting and time.monotonic() > deadline:
            raise RunFailed(f"no sshd on {', '.join(waiting)} port {port} after "
                            f"{timeout_s:.0f} s")
        if waiting:
            time.sleep(1)


def stop(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_plan(plan: Plan, env: dict | None = None) -> int:
    """Run the ranks; their output goes to the job's log. Returns srun's or
    horovodrun's exit code. Whatever interrupts it (a signal turned into
    SystemExit, submitit's requeue) stops that launcher first, so that it
    stops the ranks on every node."""
    sshd = None
    try:
        if plan.sshd:
            sshd = subprocess.Popen(plan.sshd)
            wait_for_sshd(plan.ssh_hosts, plan.ssh_port, sshd)
        main = subprocess.Popen(plan.main, cwd=plan.cwd, env=env)
        try:
            return main.wait()
        finally:
            stop(main)
    finally:
        if sshd:
            stop(sshd)


def describe(allocation: Allocation, settings: Settings, plan: Plan,
             choice: network.Choice | None, kept: dict[str, str] | None = None) -> str:
    """The job's first lines: the ranks, how they start, the network (and
    the layers' variables the user set, `kept`), the commands."""
    how = ("each a Slurm task (srun --mpi=pmix)" if settings.launcher == "srun"
           else "started by horovodrun over ssh")
    net = choice.said if choice else "chosen by the probe when the job runs"
    lines = [f"slurm: job {allocation.job_id}: {rank_count(allocation, settings)} ranks on "
             f"{allocation.host_list}, {how}, runtime {settings.runtime}"
             + (f", restart {allocation.restarts}" if allocation.restarts else "")
             + f"; network {net}"
             + "".join(f", {name}={value} as set" for name, value in (kept or {}).items())]
    if choice and choice.left_out:
        lines.append("slurm: network: " + "; ".join(choice.left_out))
    steps = [("check", plan.check), ("probe", plan.probe), ("sshd step", plan.sshd)]
    lines += [f"slurm: {name}: {shlex.join(argv)}" for name, argv in steps if argv and not choice]
    lines.append(f"slurm: run{f' in {plan.cwd}' if plan.cwd else ''}: {shlex.join(plan.main)}")
    return "\n".join(lines)


def preflight(allocation: Allocation, settings: Settings, cpu_only: bool) -> None:
    """HVT_PREFLIGHT=1: the nodes, every pair and an allreduce over the
    ranks, as the job will start them (srun's tasks, or horovodrun's ssh);
    a problem ends the job (exit 1) before any rank starts."""
    from horovod_train.launch import preflight as checks

    request = checks.Request(list(allocation.hosts), rank_count(allocation, settings),
                             settings.ssh_port, None, list(settings.interfaces) or None,
                             None if settings.launcher == "srun" else "gloo",
                             settings.checkout, allreduce=True, cpu_only=cpu_only,
                             slurm=settings.launcher == "srun", checkout=settings.checkout)
    if checks.run(request) != 0:
        raise SystemExit(1)


def run_job(trainer_args: list[str], env: dict | None = None, settings: Settings | None = None,
            dry_run: bool = False) -> int:
    """The whole job from inside the allocation: read it, plan, check, choose
    the network, print, run."""
    env = dict(os.environ if env is None else env)
    allocation = allocation_from_env(env)
    settings = settings or settings_from_env(env)
    plan = make_plan(allocation, settings, trainer_args)
    if dry_run:
        print(describe(allocation, settings, plan, None), flush=True)
        return 0
    if settings.launcher == "srun":
        check_pmix()
    check_trainer_options(plan, settings)
    if settings.preflight:
        preflight(allocation, settings, "--no-cuda" in trainer_args)
    # horovodrun hands its own choice to every layer; srun's ranks keep the user's.
    kept = layers_set(env) if settings.launcher == "srun" else {}
    choice = choose_network(plan, allocation, settings, kept, env)
    print(describe(allocation, settings, plan, choice, kept), flush=True)
    if settings.launcher == "srun":
        env.update(srun_rank_environment(choice, env))
    else:
        plan = replace(plan, main=with_nics(plan.main, choice.horovodrun_nics))
    started = time.monotonic()
    code = run_plan(plan, env)
    print(f"slurm: job {allocation.job_id}: {settings.launcher} exited {code} after "
          f"{time.monotonic() - started:.1f} s", flush=True)
    return code


def main() -> int:
    parser = ArgumentParser(prog="slurm.py", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run"])
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER,
                        help="-- and the trainer's options")
    args = parser.parse_args()
    trainer_args = args.trainer_args[1:] if args.trainer_args[:1] == ["--"] else args.trainer_args
    # scancel's SIGTERM: stop horovodrun (and through it every rank) on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return run_job(trainer_args,
                   dry_run=parse_flag("HVT_DRY_RUN", os.environ.get("HVT_DRY_RUN")))


def cli() -> None:
    """The command's entry (python -m, through scripts/python.sh)."""
    run_main(main, prog="slurm")


if __name__ == "__main__":
    cli()
