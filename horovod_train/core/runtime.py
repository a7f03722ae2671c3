"""This process as a rank: Horovod started with the project's defaults for
each rank's environment (set before hvd.init(), the user's own values
winning), the CPU cores the ranks of a host share, and the Runtime that
describes the rank to the rest of the run. `hvd` is the framework's Horovod
module (horovod.torch, horovod.tensorflow or horovod.mxnet); all share this
API."""

import concurrent.futures
import functools
import ipaddress
import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from horovod_train.core import interfaces, phases, start_barrier
from horovod_train.core.errors import UserError
from horovod_train.core.slurm_tasks import expand_tasks_per_node

REPO = Path(__file__).resolve().parents[2]  # the checkout, when the package runs from one


@dataclass(frozen=True)
class Runtime:
    """This rank as the run sees it, from Horovod once it started (describe)."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    device: str  # "cpu" or "cuda:N" / "gpu:N"
    controller: str  # "gloo" or "mpi"
    hostname: str
    threads: int
    network: str | None  # this host's interface(s) the launcher chose for the ranks' traffic

    @property
    def is_root(self) -> bool:
        return self.rank == 0


# Open MPI waits by spinning on its core. Every rank runs Horovod's
# background thread, whose MPI calls wait so, beside its compute threads;
# where ranks use every core (CPU training, and data loaders feeding GPUs)
# the spinning takes cores from the compute, and yielding in those waits
# gives them back, with the same results (measured: docs/benchmarks.md,
# "Horovod's settings on few cores"). Each rank's Open MPI reads it when
# hvd.init() starts MPI; the user's own value wins.
RANK_MPI_SETTINGS = {"OMPI_MCA_mpi_yield_when_idle": "1"}


# What this rank set in its own process, and what the user had set instead:
# name -> {"value": ..., "set_by": "project" or "user"}, for the run's record.
APPLIED: dict[str, dict] = {}


def record_setting(name: str, value: str, set_by: str) -> None:
    APPLIED[name] = {"value": value, "set_by": set_by}


def use_defaults(settings: dict[str, str]) -> None:
    """Each setting into this process's environment, where the user set none;
    either way recorded (APPLIED). The project's own value, found set, is the
    project's: scripts/launch.sh and the Slurm job hand every rank the
    project's Open MPI file (docker/openmpi-mca-params.conf)."""
    for name, value in settings.items():
        set_by = "user" if os.environ.get(name, value) != value else "project"
        record_setting(name, os.environ.setdefault(name, value), set_by)


def brief_settings() -> str:
    """The settings of APPLIED in a few words: NAME=VALUE, the user's marked."""
    return ", ".join(f"{name}={s['value']}" + (" (yours)" if s["set_by"] == "user" else "")
                     for name, s in sorted(APPLIED.items()))


@functools.cache  # once per process: an elastic run enters the loop after every reset
def versions(framework_module: str) -> dict:
    """What the run ran on: Python, the framework, Horovod, Open MPI, and
    the checkout's commit where the package runs from a git checkout; the
    PyTorch trainer adds CUDA and NCCL on GPUs. Each None where unknown."""
    framework = sys.modules.get(framework_module)
    horovod = sys.modules.get("horovod")
    open_mpi, commit = (_SLOW_VERSIONS.pop().result() if _SLOW_VERSIONS
                        else slow_versions())
    return {
        "python": platform.python_version(),
        framework_module: getattr(framework, "__version__", None),
        "horovod": getattr(horovod, "__version__", None),
        "open_mpi": open_mpi,
        "commit": commit,
    }


def slow_versions() -> tuple[str | None, str | None]:
    """The versions read by running programs (ompi_info, git): a few tenths
    of a second, which rank 0 spends while the run starts (prefetch_versions)."""
    return open_mpi_version(), checkout_commit()


# The pending slow_versions() of prefetch_versions, for versions() to take.
_SLOW_VERSIONS: list[concurrent.futures.Future] = []


def prefetch_versions() -> None:
    """Start slow_versions() in a thread now, for versions() to take later."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    _SLOW_VERSIONS.append(pool.submit(slow_versions))
    pool.shutdown(wait=False)


def open_mpi_version() -> str | None:
    """From `ompi_info --version` (`Open MPI v4.1.4`), where Open MPI is installed."""
    text = command_output("ompi_info", "--version")
    words = text.split() if text else []
    return words[2].lstrip("v") if len(words) > 2 and words[:2] == ["Open", "MPI"] else None


def checkout_commit() -> str | None:
    """The checkout's commit, with "+changes" where tracked files differ from it."""
    if not (REPO / ".git").exists():
        return None
    commit = command_output("git", "-C", str(REPO), "rev-parse", "HEAD")
    changed = command_output("git", "-C", str(REPO), "status", "--porcelain",
                             "--untracked-files=no")
    return commit and commit + ("+changes" if changed else "")


def command_output(*command: str) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def use_rank_mpi_settings() -> None:
    """RANK_MPI_SETTINGS for the MPI this process starts, where the user set none."""
    use_defaults(RANK_MPI_SETTINGS)


# Horovod fuses the gradients ready in a cycle into one buffer: it copies
# them in, reduces the buffer and copies them out, in its background thread,
# between transfers. With CPU tensors those copies are CPU work while the
# link idles. A 4 MB buffer still fuses the many small gradients (MNIST's
# whole model) and sends each large one alone, reduced in place, without
# copies (measured against horovodrun's 128 MB: docs/benchmarks.md, "A slow
# network"). GPU tensors keep Horovod's default: there the copies are device work and
# NCCL needs large messages to fill its links. The user's value wins
# (horovodrun --fusion-threshold-mb sets it for the ranks).
CPU_RANK_HOROVOD_SETTINGS = {"HOROVOD_FUSION_THRESHOLD": str(4 * 1024 * 1024)}


# The Slurm job hands its ranks the networks it chose in CIDR form,
# HVT_NETWORKS (launch/slurm/sbatch.py), and Open MPI's variables the same. Gloo
# and NCCL take interface names, which may differ from host to host: each
# rank names its own host's. NCCL reads a bare name as a prefix (eth1 would
# also select eth10): `=` asks for exact names.
def chosen_network_settings(text: str, local: list[interfaces.Interface],
                            host: str) -> dict[str, str]:
    """Gloo's and NCCL's interface settings for the networks `text` (CIDR
    form, comma-separated) on this host, whose interfaces are `local`."""
    try:
        names = interfaces.names_on(interfaces.parse_networks(text), local)
    except ValueError as err:
        raise UserError(f"HVT_NETWORKS={text}: {err}") from None
    if not names:
        raise UserError(f"HVT_NETWORKS={text}: no interface of {host} has an address on it")
    return {"HOROVOD_GLOO_IFACE": names[0], "NCCL_SOCKET_IFNAME": "=" + ",".join(names)}


def use_chosen_networks() -> None:
    """The job's chosen networks (HVT_NETWORKS) as this host's interface
    names for Gloo and NCCL, where the user set none."""
    text = os.environ.get("HVT_NETWORKS")
    if text:
        use_defaults(chosen_network_settings(text, interfaces.local_interfaces(),
                                             socket.gethostname()))


@functools.cache  # once per process: the start barrier must be met once
def prepare_rank() -> None:
    """What any script's rank needs before hvd.init(), from the launcher's
    settings: the project's MPI settings, this host's interfaces on the
    job's chosen networks, and MPI started at the start barrier where the
    launcher set one. The trainers do it in init_horovod; a user's script
    that srun starts has it done by core/rank_script.py."""
    use_rank_mpi_settings()
    use_chosen_networks()
    start_mpi_at_the_start_barrier()


def init_horovod(hvd, cpu_tensors: bool) -> None:
    """hvd.init(), with the rank prepared (prepare_rank) and the project's
    Horovod settings for CPU tensors where the rank trains on the CPU."""
    if cpu_tensors:
        use_defaults(CPU_RANK_HOROVOD_SETTINGS)
    prepare_rank()
    hvd.init()
    phases.mark("horovod")
    if hvd.rank() == 0:
        prefetch_versions()  # the run's first line needs them: read them meanwhile


def start_mpi_at_the_start_barrier() -> None:
    """Where the launcher set HVT_START_BARRIER: MPI_Init here, then the
    start barrier (core/start_barrier.py says why), before hvd.init().
    Horovod then takes MPI as started, and finalizes it never: mpi4py does,
    at exit."""
    barrier = os.environ.get("HVT_START_BARRIER")
    if not barrier:
        return
    token = start_barrier.token_of()
    from mpi4py import MPI  # noqa: PLC0415 - importing it is MPI_Init_thread(MULTIPLE)

    world = MPI.COMM_WORLD
    address = start_barrier.parse(barrier)[0]
    mine = {iface.ip for iface in interfaces.local_interfaces() if iface.ip}
    is_root = address in mine and os.environ.get("SLURM_LOCALID", "0") == "0"
    start_barrier.wait_for_every_rank(barrier, world.Get_rank(), world.Get_size(), is_root, token)
    record_setting("HVT_START_BARRIER", barrier, "project")  # the launcher's, for the record


def threads_per_rank(local_size: int, requested: int | None) -> int:
    """Ranks on one host share its cores; oversubscribed threads thrash."""
    return requested or max(1, len(os.sched_getaffinity(0)) // local_size)


def local_size_before_init() -> int:
    """How many ranks share this host, before Horovod is up: horovodrun
    (Gloo) and mpirun (MPI) tell each process; srun tells each task how many
    tasks every node of its step runs."""
    told = os.environ.get("HOROVOD_LOCAL_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    if told:
        return int(told)
    step_tasks, node = os.environ.get("SLURM_STEP_TASKS_PER_NODE"), os.environ.get("SLURM_NODEID")
    if step_tasks and node and node.isdigit():
        return expand_tasks_per_node(step_tasks)[int(node)]
    return 1


def threads_before_init(requested: int | None) -> int:
    """threads_per_rank before Horovod is up."""
    return threads_per_rank(local_size_before_init(), requested)


# Where each controller's launcher names the ranks' interface: horovodrun
# (its probe's choice, or --network-interfaces) and the Slurm job's srun
# (launch/network.py's, as networks in CIDR form for Open MPI) both set these.
NETWORK_VARIABLES = {"gloo": "HOROVOD_GLOO_IFACE", "mpi": "OMPI_MCA_btl_tcp_if_include"}


def interface_names(value: str | None, local: list[interfaces.Interface]) -> str | None:
    """A layer's interface setting with its networks in CIDR form turned into
    the names of this host's interfaces (`local`) on them."""
    if not value or "/" not in value:
        return value
    names: list[str] = []
    for item in (item.strip() for item in value.split(",")):
        try:
            found = interfaces.names_on([ipaddress.IPv4Network(item)], local)
        except ValueError:  # a name, or what Open MPI will refuse itself
            found = [item]
        names += [name for name in found if name not in names]
    return ",".join(names) or value


def describe(hvd, device: str, threads: int) -> Runtime:
    controller = "gloo" if hvd.gloo_enabled() else "mpi"
    return Runtime(
        rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
        local_size=hvd.local_size(), device=device, controller=controller,
        hostname=socket.gethostname(), threads=threads,
        network=interface_names(os.environ.get(NETWORK_VARIABLES[controller]),
                                interfaces.local_interfaces()),
    )
