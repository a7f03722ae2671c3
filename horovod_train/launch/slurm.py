"""Horovod on a Slurm allocation: the job's nodes and tasks per node become
horovodrun's host list and -np, and the job runs the trainer across them,
either on the nodes with the checkout's venv or inside the image through the
site's container runtime. scripts/slurm/horovod.sbatch runs it in the batch
step (on the allocation's first node), and so do the jobs of
scripts/slurm/submit.py: one recipe for both.

    python horovod_train/launch/slurm.py run [-- TRAINER OPTIONS...]

A Slurm job of 2 nodes with 2 tasks each (SLURM_JOB_NODELIST=a,b,
SLURM_TASKS_PER_NODE=2(x2)) runs

    horovodrun -np 4 -H a:2,b:2 [-p PORT] --gloo python TRAINER OPTIONS...

Settings, from the environment (`sbatch --export`, or exported before sbatch):

    HOROVOD_RUNTIME   venv (default): the checkout's .venv on every node;
                      apptainer: `apptainer exec` of HOROVOD_IMAGE (a .sif file
                      or docker://...); pyxis: `srun --container-image` of
                      HOROVOD_IMAGE (an enroot URI or a .sqsh file)
    HOROVOD_IMAGE     the image, for apptainer and pyxis
    HOROVOD_KEYS      apptainer and pyxis: the cluster's key directory
                      (scripts/cluster_keys.sh), mounted read-only at
                      /etc/horovod/keys, where the image's sshd takes its keys
    HOROVOD_MOUNTS    apptainer and pyxis: more binds, SRC:DST[:ro],... (data, outputs)
    HOROVOD_SSH_PORT  the port horovodrun's ssh uses (the image's sshd: 12345,
                      the default with containers; venv: ssh_config's, unless set)
    HOROVOD_TRAINER   the entry script (default horovod_train/pytorch_mnist.py)
    HOROVOD_TRAIN_DIR the checkout (default: the job's working directory); venv:
                      its .venv runs; apptainer and pyxis: mounted at /workspace,
                      the image's working directory (the image holds no code)
    RESUME=1          add --resume: continue from the trainer's checkpoint. A
                      job that Slurm requeued (SLURM_RESTART_COUNT > 0) resumes
                      without it.
    HOROVOD_DRY_RUN=1 print the commands instead of running them

With a container runtime every node runs the image's entrypoint, which
starts its sshd on HOROVOD_SSH_PORT with the cluster's key: on the other
nodes as a job step that lasts the job, on the first node around
horovodrun, whose ssh then lands in the other nodes' containers.

Standard library only: sites that run the image may have no venv on the
nodes, only a python3.
"""

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file (the batch script does): import the package from the checkout.
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from horovod_train.errors import ArgumentParser, RunFailed, UserError, run_main  # noqa: E402
from horovod_train.launch.hosts import Host, SshTarget, host_list, probe_ssh_port, total_slots  # noqa: E402

RUNTIMES = ("venv", "apptainer", "pyxis")
DEFAULT_TRAINER = "horovod_train/pytorch_mnist.py"
# The image's layout (docker/Dockerfile): its venv, trainers, entrypoint and sshd port.
IMAGE_WORKDIR = "/workspace"
IMAGE_PYTHON = "/opt/venv/bin/python"
IMAGE_HOROVODRUN = "/opt/venv/bin/horovodrun"
IMAGE_ENTRYPOINT = "/usr/local/bin/entrypoint.sh"
IMAGE_KEYS = "/etc/horovod/keys"
IMAGE_SSH_PORT = 12345
SSHD_WAIT_S = 600  # the other nodes' containers: pulling an image can take minutes
STOP_GRACE_S = 20  # horovodrun's time to stop its ranks before it is killed

TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
MOUNT_ITEM = re.compile(r"^([^:,]+):(/[^:,]*)(:ro)?$")


# --- the allocation -------------------------------------------------------------

def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE's compressed form, one count per node:
    '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for item in text.split(","):
        match = TASKS_ITEM.match(item.strip())
        if not match or int(match[1]) < 1 or (match[2] and int(match[2]) < 1):
            raise UserError(f"SLURM_TASKS_PER_NODE={text}: cannot read {item.strip()!r} "
                            "(want counts such as 2(x2),1)")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


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
    nodes = tuple(Host(name, count) for name, count in zip(names, tasks, strict=True))
    return Allocation(job_id, nodes, int(restarts) if restarts.isdigit() else 0)


# --- the settings ---------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    runtime: str
    image: str | None
    keys: str | None
    mounts: tuple[str, ...]
    ssh_port: int | None
    trainer: str
    resume: bool
    checkout: Path


def parse_flag(name: str, text: str | None) -> bool:
    value = (text or "").strip().lower()
    if value in ("", "0", "no", "false"):
        return False
    if value in ("1", "yes", "true"):
        return True
    raise UserError(f"{name}={text}: want 1 or 0")


def make_settings(runtime: str = "venv", image: str | None = None, keys: str | None = None,
                  mounts: str | None = None, ssh_port: str | int | None = None,
                  trainer: str | None = None, resume: bool = False,
                  checkout: str | Path | None = None) -> Settings:
    """Checked settings; every problem is one UserError naming the variable."""
    if runtime not in RUNTIMES:
        raise UserError(f"HOROVOD_RUNTIME={runtime}: unknown runtime; use one of "
                        f"{', '.join(RUNTIMES)}")
    container = runtime != "venv"
    if container and not image:
        raise UserError(f"HOROVOD_RUNTIME={runtime} needs HOROVOD_IMAGE, the image to run")
    if container and not keys:
        raise UserError(f"HOROVOD_RUNTIME={runtime} needs HOROVOD_KEYS, the cluster's key "
                        "directory (scripts/cluster_keys.sh): the image's sshd takes its keys "
                        f"from it at {IMAGE_KEYS}")
    if keys and not Path(keys, "authorized_keys").is_file():
        raise UserError(f"HOROVOD_KEYS={keys} has no authorized_keys "
                        "(make the directory with scripts/cluster_keys.sh)")
    mount_list = tuple(m.strip() for m in (mounts or "").split(",") if m.strip())
    for mount in mount_list:
        if not MOUNT_ITEM.match(mount):
            raise UserError(f"HOROVOD_MOUNTS: {mount!r} is not SRC:DST or SRC:DST:ro "
                            "(DST absolute)")
    if mount_list and not container:
        raise UserError("HOROVOD_MOUNTS is for the container runtimes; the venv sees every path")
    port = None
    if ssh_port not in (None, ""):
        if not str(ssh_port).isdigit() or not 1 <= int(ssh_port) <= 65535:
            raise UserError(f"HOROVOD_SSH_PORT={ssh_port}: want a port number")
        port = int(ssh_port)
    elif container:
        port = IMAGE_SSH_PORT
    checkout = Path(checkout or os.getcwd()).resolve()
    horovodrun = checkout / ".venv" / "bin" / "horovodrun"
    if not container and not horovodrun.exists():
        raise UserError(f"no {horovodrun}: run scripts/setup.sh in the checkout, and submit "
                        "from it (or set HOROVOD_TRAIN_DIR)")
    return Settings(runtime, image or None, str(Path(keys).resolve()) if keys else None,
                    mount_list, port, trainer or DEFAULT_TRAINER, resume, checkout)


def settings_from_env(env: dict) -> Settings:
    return make_settings(runtime=env.get("HOROVOD_RUNTIME") or "venv",
                         image=env.get("HOROVOD_IMAGE"), keys=env.get("HOROVOD_KEYS"),
                         mounts=env.get("HOROVOD_MOUNTS"), ssh_port=env.get("HOROVOD_SSH_PORT"),
                         trainer=env.get("HOROVOD_TRAINER"),
                         resume=parse_flag("RESUME", env.get("RESUME")),
                         checkout=env.get("HOROVOD_TRAIN_DIR"))


# --- the commands ---------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What the job runs: `main` on the first node (in the batch step); with
    a container runtime and more than one node, first `sshd` on the others,
    for as long as `main` runs."""
    main: list[str]
    cwd: str | None = None
    sshd: list[str] | None = None
    ssh_hosts: tuple[str, ...] = ()
    ssh_port: int | None = None


def trainer_arguments(trainer_args: list[str], settings: Settings,
                      allocation: Allocation) -> list[str]:
    """The trainer's options, with --resume when asked for (RESUME=1) or when
    Slurm restarted this job after a requeue."""
    resume = settings.resume or allocation.restarts > 0
    return [*trainer_args, *(["--resume"] if resume and "--resume" not in trainer_args else [])]


def horovodrun_options(allocation: Allocation, ssh_port: int | None) -> list[str]:
    port = ["-p", str(ssh_port)] if ssh_port else []
    return ["-np", str(allocation.num_proc), "-H", allocation.host_list, *port, "--gloo"]


def make_plan(allocation: Allocation, settings: Settings, trainer_args: list[str]) -> Plan:
    args = trainer_arguments(trainer_args, settings, allocation)
    options = horovodrun_options(allocation, settings.ssh_port)
    if settings.runtime == "venv":
        venv = settings.checkout / ".venv" / "bin"
        return Plan([str(venv / "horovodrun"), *options, str(venv / "python"),
                     settings.trainer, *args], cwd=str(settings.checkout))

    first, others = allocation.nodes[0], allocation.nodes[1:]
    environment = {"CLUSTER_HOSTS": " ".join(allocation.nodes),
                   "SSH_PORT": str(settings.ssh_port)}
    mounts = [f"{settings.keys}:{IMAGE_KEYS}:ro", f"{settings.checkout}:{IMAGE_WORKDIR}",
              *settings.mounts]
    training = [IMAGE_ENTRYPOINT, IMAGE_HOROVODRUN, *options, IMAGE_PYTHON, settings.trainer, *args]
    keep_sshd = [IMAGE_ENTRYPOINT, "sleep", "infinity"]
    # One task on each other node, for the job's length; no --exact, so the
    # step keeps the job's CPUs there for the ranks its sshd starts.
    other_nodes = ["srun", f"--nodes={len(others)}", f"--ntasks={len(others)}",
                   "--ntasks-per-node=1", f"--nodelist={','.join(others)}"]

    if settings.runtime == "apptainer":
        # --fakeroot --writable-tmpfs: the entrypoint writes root's ssh files and
        # a host key, and sshd runs as root, inside the container only.
        container = ["apptainer", "exec", "--fakeroot", "--writable-tmpfs",
                     "--pwd", IMAGE_WORKDIR,
                     *[flag for mount in mounts for flag in ("--bind", mount)],
                     *[flag for name, value in environment.items()
                       for flag in ("--env", f"{name}={value}")],
                     settings.image]
        main = [*container, *training]
        sshd = [*other_nodes, *container, *keep_sshd]
    else:  # pyxis: srun's --container-* options; entrypoints are not run unless asked
        container = [f"--container-image={settings.image}",
                     f"--container-mounts={','.join(mounts)}",
                     f"--container-workdir={IMAGE_WORKDIR}",
                     "--container-remap-root", "--container-writable",
                     "--export=ALL," + ",".join(f"{k}={v}" for k, v in environment.items())]
        main = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={first}", *container, *training]
        sshd = [*other_nodes, *container, *keep_sshd]
    if not others:
        return Plan(main)
    return Plan(main, sshd=sshd, ssh_hosts=tuple(others), ssh_port=settings.ssh_port)


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


def run_plan(plan: Plan) -> int:
    """Run the job's commands; their output goes to the job's log. Returns
    horovodrun's exit code. Whatever interrupts it (a signal turned into
    SystemExit, submitit's requeue) stops horovodrun first, so that it stops
    its ranks on every node."""
    sshd = None
    try:
        if plan.sshd:
            sshd = subprocess.Popen(plan.sshd)
            wait_for_sshd(plan.ssh_hosts, plan.ssh_port, sshd)
        main = subprocess.Popen(plan.main, cwd=plan.cwd)
        try:
            return main.wait()
        finally:
            stop(main)
    finally:
        if sshd:
            stop(sshd)


def describe(allocation: Allocation, settings: Settings, plan: Plan) -> str:
    lines = [f"slurm: job {allocation.job_id}: {allocation.num_proc} ranks on "
             f"{allocation.host_list} (runtime {settings.runtime}"
             + (f", restart {allocation.restarts}" if allocation.restarts else "") + ")"]
    if plan.sshd:
        lines.append(f"slurm: sshd step: {shlex.join(plan.sshd)}")
    lines.append(f"slurm: run{f' in {plan.cwd}' if plan.cwd else ''}: {shlex.join(plan.main)}")
    return "\n".join(lines)


def run_job(trainer_args: list[str], env: dict | None = None, settings: Settings | None = None,
            dry_run: bool = False) -> int:
    """The whole job from inside the allocation: read it, plan, print, run."""
    env = os.environ if env is None else env
    allocation = allocation_from_env(env)
    settings = settings or settings_from_env(env)
    plan = make_plan(allocation, settings, trainer_args)
    print(describe(allocation, settings, plan), flush=True)
    if dry_run:
        return 0
    started = time.monotonic()
    code = run_plan(plan)
    print(f"slurm: job {allocation.job_id}: horovodrun exited {code} after "
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
                   dry_run=parse_flag("HOROVOD_DRY_RUN", os.environ.get("HOROVOD_DRY_RUN")))


def cli() -> None:
    """The console entry point (pyproject.toml)."""
    run_main(main, prog="slurm")


if __name__ == "__main__":
    cli()
