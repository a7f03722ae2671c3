"""What a Slurm job runs, planned from its settings (the HVT_ variables,
checked: make_settings, a Job with its SlurmRun section) and its allocation
(which gives the Job its hosts): the trainer's option check, the
network probe, and the ranks, started by srun (a Slurm task each) or by
horovodrun from the first node, in the checkout's venv or in the image
(Apptainer, Pyxis). launch/slurm/sbatch.py runs the plan; its help lists the
settings.

Standard library only: sites that run the image may have no venv on the
nodes, only a python3."""

import os
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from horovod_train.core.errors import UserError
from horovod_train.launch import allocation as allocation_module
from horovod_train.launch import network, pipeline, starters
from horovod_train.launch.allocation import Allocation
from horovod_train.launch.hosts import IMAGE_SSH_PORT
from horovod_train.launch.job import PROBE_ARGS, Job, SlurmRun

LAUNCHERS = ("srun", "horovodrun")
RUNTIMES = ("venv", "apptainer", "pyxis")
DEFAULT_TRAINER = "horovod_train/pytorch_mnist.py"
# What every srun rank runs first: it prepares the rank, then runs the script.
RANK_SCRIPT = "horovod_train.core.rank_script"
# The image's layout (docker/Dockerfile): its venv, trainers and entrypoint;
# its sshd port is hosts.IMAGE_SSH_PORT.
IMAGE_WORKDIR = "/workspace"
IMAGE_PYTHON = "/opt/venv/bin/python"
IMAGE_HOROVODRUN = "/opt/venv/bin/horovodrun"
IMAGE_ENTRYPOINT = "/usr/local/bin/entrypoint.sh"
IMAGE_KEYS = "/etc/horovod/keys"

MOUNT_ITEM = re.compile(r"^([^:,]+):(/[^:,]*)(:ro)?$")
# --- the settings ---------------------------------------------------------------
# A Slurm job's settings are a Job (launch/job.py) whose hosts its
# allocation gives (with_allocation), with its own section, SlurmRun.


def runtime_python(job: Job) -> str:
    """The Python that runs the job's program on the nodes: the image's, or
    the checkout's venv's."""
    return IMAGE_PYTHON if job.slurm.in_container else str(venv_bin(job.checkout) / "python")


def venv_bin(checkout: Path) -> Path:
    """The checkout's venv's programs (its Python, horovodrun)."""
    return checkout / ".venv" / "bin"


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
                  preflight: bool = False) -> Job:
    """The job's settings, checked, as a Job without its hosts (the
    allocation gives them: with_allocation); every problem is one UserError
    naming the variable."""
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
    horovodrun = venv_bin(checkout) / "horovodrun"
    if not container and not horovodrun.exists():
        raise UserError(f"no {horovodrun}: run scripts/setup.sh in the checkout, and submit "
                        "from it (or set HVT_TRAIN_DIR)")
    if preflight and container:
        raise UserError(f"HVT_PREFLIGHT=1 checks nodes that run the checkout's .venv; with "
                        f"HVT_RUNTIME={runtime}, run scripts/preflight.sh in the image instead")
    return Job(hosts=(), num_proc=ranks or 0, ssh_port=port, network=names,
               controller="gloo" if over_ssh else None, starter=launcher, allocation=True,
               checkout=checkout, workdir=checkout,
               slurm=SlurmRun(runtime=runtime, image=image or None,
                              keys=str(Path(keys).resolve()) if keys else None,
                              mounts=mount_list, trainer=trainer or None, resume=resume,
                              preflight=preflight))


def settings_from_env(env: dict) -> Job:
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


# --- what the ranks run -----------------------------------------------------------

@dataclass(frozen=True)
class Program:
    """What every rank runs, after the runtime's python: a script by path
    (or a module, -m) with its arguments, Python's own flags before it.
    Only a `checked` one (it answers --check-options: the project's
    trainers, or a script that carries pipeline.OPTION_CHECK_MARK) is
    asked --check-options first and given --resume."""
    target: str
    args: tuple[str, ...] = ()
    module: bool = False
    flags: tuple[str, ...] = ()
    checked: bool = False

    def words(self, *more: str) -> list[str]:
        """python's arguments: flags, the script (or -m MODULE), its arguments."""
        return [*self.flags, *(["-m"] if self.module else []), self.target, *self.args, *more]


def job_program(job_args: list[str], job: Job) -> Program:
    """The job's arguments as what its ranks run. Either the options of
    HVT_TRAINER's script (the project's PyTorch trainer where it is unset):

        sbatch scripts/slurm/horovod.sbatch --epochs 3

    or a command whose python is the runtime's (the checkout's venv, or the
    image's):

        sbatch scripts/slurm/horovod.sbatch -- python [-u] my_train.py ARGS
        sbatch scripts/slurm/horovod.sbatch -- python -m my_package.train ARGS

    A script's path is the checkout's where it is relative. What cannot run
    is one UserError."""
    words = job_args[1:] if job_args[:1] == ["--"] else job_args
    if words and pipeline.is_python(words[0]):
        if job.slurm.trainer:
            raise UserError(f"HVT_TRAINER={job.slurm.trainer} and the job's command "
                            f"({shlex.join(words[:2])} ...) both say what the ranks run: "
                            "give one")
        program = python_command(words)
    elif job_args[:1] == ["--"] and words and not words[0].startswith("-"):
        raise UserError(f"the job's command must run Python: python SCRIPT ARGS or python -m "
                        f"MODULE ARGS (the runtime's python); got {shlex.join(words)}")
    else:
        program = Program(job.slurm.trainer or DEFAULT_TRAINER, tuple(words))
    if program.module:
        return program
    script = job.checkout / program.target  # an absolute target stays itself
    if not script.is_file() and not (job.slurm.in_container and Path(program.target).is_absolute()):
        # An absolute path in a container may be the image's own, or a mount's.
        raise UserError(f"{program.target}: no such script"
                        + ("" if Path(program.target).is_absolute()
                           else f" in the checkout {job.checkout}"))
    checked = pipeline.answers_option_check(script)
    return Program(program.target, program.args, False, program.flags, checked)


def python_command(words: list[str]) -> Program:
    """`python [FLAGS] SCRIPT ARGS` or `python [FLAGS] -m MODULE ARGS` as a Program."""
    at = 1
    while at < len(words) and words[at] in pipeline.PYTHON_FLAGS:
        at += 1
    flags, rest = tuple(words[1:at]), words[at:]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return Program(rest[1], tuple(rest[2:]), True, flags)
    if not rest or rest[0].startswith("-"):
        flags_taken = " ".join(pipeline.PYTHON_FLAGS)
        raise UserError(f"{shlex.join(words)}: the job runs python [{flags_taken}] SCRIPT ARGS "
                        "or python -m MODULE ARGS")
    return Program(rest[0], tuple(rest[1:]), False, flags)


# --- the commands ---------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What the job runs, in order: `check`, the script's options, in one
    task, where the script answers --check-options (else None); `probe`, the
    network, in a task per node; then `main`, the ranks.
    With horovodrun, a container runtime and more than one node, `sshd` on
    the other nodes first, for as long as `main` runs."""
    main: list[str]
    check: list[str] | None
    cwd: str | None
    probe: list[str]
    sshd: list[str] | None = None
    ssh_hosts: tuple[str, ...] = ()
    ssh_port: int | None = None


def with_resume(program: Program, job: Job, restarts: int) -> Program:
    """The program with --resume when asked for (HVT_RESUME=1) or when Slurm
    restarted this job after a requeue, where the program takes it (a
    checked one); another script resumes by itself."""
    if job.slurm.resume and not program.checked:
        raise UserError(f"HVT_RESUME=1 adds --resume, which {program.target} is not known to "
                        f"take (it carries no `{pipeline.OPTION_CHECK_MARK}` line): let the "
                        "script resume from its own checkpoint")
    resume = (job.slurm.resume or restarts > 0) and program.checked
    if not resume or "--resume" in program.args:
        return program
    return Program(program.target, (*program.args, "--resume"), program.module, program.flags,
                   program.checked)


def rank_count(allocation: Allocation, job: Job) -> int:
    if job.num_proc > allocation.num_proc:
        raise UserError(f"HVT_NUM_PROC={job.num_proc} is more than the "
                        f"{allocation.num_proc} tasks of job {allocation.job_id} "
                        f"({allocation.host_list}): lower it, or submit with more tasks")
    return job.num_proc or allocation.num_proc


def with_allocation(job: Job, allocation: Allocation, cpu_only: bool = False) -> Job:
    """The job's settings with the allocation's hosts and the ranks it
    starts on them; `cpu_only`: the program's --no-cuda."""
    return replace(job, hosts=allocation.hosts, num_proc=rank_count(allocation, job),
                   cpu_only=cpu_only)


def apptainer_exec(job: Job, mounts: list[str], environment: dict | None = None,
                   sshd: bool = False) -> list[str]:
    # --nv: the node's NVIDIA driver and GPUs in the container. With sshd,
    # --fakeroot --writable-tmpfs: the entrypoint writes its ssh files
    # (/run/hvt-ssh) and sshd runs as root, inside the container only;
    # --no-home: Apptainer would bind the user's shared home at /root under
    # --fakeroot, and its ~/.ssh/config would steer the job's ssh.
    return ["apptainer", "exec", "--nv",
            *(["--fakeroot", "--writable-tmpfs", "--no-home"] if sshd else []),
            "--pwd", IMAGE_WORKDIR, *[flag for mount in mounts for flag in ("--bind", mount)],
            *[flag for name, value in (environment or {}).items()
              for flag in ("--env", f"{name}={value}")],
            job.slurm.image]


def pyxis_options(job: Job, mounts: list[str], environment: dict | None = None,
                  sshd: bool = False) -> list[str]:
    # srun's --container-* options; entrypoints are not run unless asked.
    return [f"--container-image={job.slurm.image}", f"--container-mounts={','.join(mounts)}",
            f"--container-workdir={IMAGE_WORKDIR}",
            *(["--container-remap-root", "--container-writable"] if sshd else []),
            *(["--export=ALL," + ",".join(f"{k}={v}" for k, v in environment.items())]
              if environment else [])]


def srun_in_runtime(job: Job, srun_options: list[str], argv: list[str]) -> list[str]:
    """srun SRUN_OPTIONS, its tasks running argv in the job's runtime: the
    checkout's venv, or the image with the checkout at /workspace."""
    mounts = [f"{job.checkout}:{IMAGE_WORKDIR}", *job.slurm.mounts]
    if job.slurm.runtime == "apptainer":
        return ["srun", *srun_options, *apptainer_exec(job, mounts), *argv]
    if job.slurm.runtime == "pyxis":
        return ["srun", *srun_options, *pyxis_options(job, mounts), *argv]
    return ["srun", *srun_options, *argv]


def make_plan(allocation: Allocation, job: Job, job_args: list[str],
              choice: network.Choice | None = None) -> Plan:
    """The job's commands; horovodrun's with the chosen network once there
    is one (srun's ranks take it from their environment)."""
    program = with_resume(job_program(job_args, job), job, allocation.restarts)
    container, python = job.slurm.in_container, runtime_python(job)
    cwd = None if container else str(job.checkout)
    check = srun_in_runtime(job, ["--nodes=1", "--ntasks=1", "--mpi=none"],
                            [python, *program.words("--check-options")]) \
        if program.checked else None
    probe = allocation_module.on_each_node(allocation.nodes, job.checkout,
                                           PROBE_ARGS, stdin=True)
    if job.starter == "srun":
        ranks = starters.srun_options(with_allocation(job, allocation),
                                      allocation.cpus_per_task)
        # Each rank prepared, then the program run (core/rank_script.py).
        rank = [python, *program.flags, "-m", RANK_SCRIPT,
                *program.words()[len(program.flags):]]
        return Plan(srun_in_runtime(job, ranks, rank), check, cwd, probe)

    options = starters.horovodrun_options(
        with_allocation(job, allocation, "--no-cuda" in job_args), choice)
    if not container:
        return Plan([str(venv_bin(job.checkout) / "horovodrun"), *options, python,
                     *program.words()], check, cwd, probe)

    first, others = allocation.nodes[0], allocation.nodes[1:]
    environment = {"HVT_CLUSTER_HOSTS": " ".join(allocation.nodes),
                   "HVT_SSH_PORT": str(job.ssh_port)}
    mounts = [f"{job.slurm.keys}:{IMAGE_KEYS}:ro", f"{job.checkout}:{IMAGE_WORKDIR}",
              *job.slurm.mounts]
    training = [IMAGE_ENTRYPOINT, IMAGE_HOROVODRUN, *options, python, *program.words()]
    keep_sshd = [IMAGE_ENTRYPOINT, "sleep", "infinity"]
    # One task on each other node, for the job's length; no --exact, so the
    # step keeps the job's CPUs there for the ranks its sshd starts.
    other_nodes = ["srun", f"--nodes={len(others)}", f"--ntasks={len(others)}",
                   "--ntasks-per-node=1", f"--nodelist={','.join(others)}"]
    if job.slurm.runtime == "apptainer":
        container_argv = apptainer_exec(job, mounts, environment, sshd=True)
        main = [*container_argv, *training]
        sshd = [*other_nodes, *container_argv, *keep_sshd]
    else:
        options = pyxis_options(job, mounts, environment, sshd=True)
        main = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={first}", *options, *training]
        sshd = [*other_nodes, *options, *keep_sshd]
    if not others:
        return Plan(main, check, cwd, probe)
    return Plan(main, check, cwd, probe, sshd, tuple(others), job.ssh_port)
