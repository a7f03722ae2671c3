"""What every trainer does with Horovod, whatever the framework: describe the
process, share CPU cores, stop all ranks together on a user error, and
fingerprint the weights. `hvd` is the framework's Horovod module
(horovod.torch, horovod.tensorflow or horovod.mxnet); all share this API."""

import contextlib
import hashlib
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from horovod_train.core import mnist, outputs, sharding
from horovod_train.core.config import RunConfig
from horovod_train.core.errors import RunFailed, UserError


@dataclass(frozen=True)
class Runtime:
    rank: int
    size: int
    local_rank: int
    local_size: int
    device: str  # "cpu" or "cuda:N" / "gpu:N"
    controller: str  # "gloo" or "mpi"
    hostname: str
    threads: int
    network: str | None  # the interface(s) the launcher chose for the ranks' traffic

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


def use_defaults(settings: dict[str, str]) -> None:
    """Each setting into this process's environment, where the user set none."""
    for name, value in settings.items():
        os.environ.setdefault(name, value)


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


def init_horovod(hvd, cpu_tensors: bool) -> None:
    """hvd.init(), with the project's MPI settings for this rank, and its
    Horovod settings for CPU tensors where the rank trains on the CPU."""
    use_rank_mpi_settings()
    if cpu_tensors:
        use_defaults(CPU_RANK_HOROVOD_SETTINGS)
    hvd.init()


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
        from horovod_train.launch.slurm import expand_tasks_per_node

        return expand_tasks_per_node(step_tasks)[int(node)]
    return 1


def threads_before_init(requested: int | None) -> int:
    """threads_per_rank before Horovod is up."""
    return threads_per_rank(local_size_before_init(), requested)


# Where each controller's launcher names the ranks' interface: horovodrun
# (its probe's choice, or --network-interfaces) and the Slurm job's srun
# (launch/network.py's) both set these.
NETWORK_VARIABLES = {"gloo": "HOROVOD_GLOO_IFACE", "mpi": "OMPI_MCA_btl_tcp_if_include"}


def describe(hvd, device: str, threads: int) -> Runtime:
    controller = "gloo" if hvd.gloo_enabled() else "mpi"
    return Runtime(
        rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
        local_size=hvd.local_size(), device=device, controller=controller,
        hostname=socket.gethostname(), threads=threads,
        network=os.environ.get(NETWORK_VARIABLES[controller]),
    )


def check_all_ranks(allgather_object, rank: int, step, name: str):
    """Run `step` on every rank and stop every rank if any of them failed.

    A UserError on one rank alone (data missing on one host, an unwritable
    or full disk on rank 0) would otherwise leave the healthy ranks waiting
    in their next collective; here all ranks learn of it and exit with the
    same one-line message, naming the rank and host that failed.
    `allgather_object` is the framework's (hvd.allgather_object)."""
    try:
        result, error = step(), None
    except UserError as err:
        result, error = None, f"{err} (rank {rank} on {socket.gethostname()})"
    errors = [e for e in allgather_object(error, name=name) if e]
    if errors:
        raise UserError(errors[0] if error is None else error)
    return result


# What Horovod's errors say when it ended the job under a rank.
HOROVOD_SHUT_DOWN = "Horovod has been shut down"
# Gloo's errors start with [file.cc:line], a path of the machine that built Horovod.
SOURCE_LOCATION = re.compile(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*")


def first_sentence(err: BaseException) -> str:
    """An error of Horovod's, for a one-line message: its first sentence,
    without Gloo's source location."""
    first = (str(err).strip() or type(err).__name__).splitlines()[0].split(". ")[0]
    return SOURCE_LOCATION.sub("", first)


@contextlib.contextmanager
def one_line_when_horovod_stops():
    """Horovod ending the job under this rank (another rank ended or stopped
    answering) as one line, a RunFailed, instead of a traceback; horovodrun
    names the rank that ended first. PyTorch raises HorovodInternalError,
    TensorFlow and MXNet errors of their own whose text says so. (An
    elastic run recovers inside, and gets here only when it cannot.)"""
    from horovod.common.exceptions import HorovodInternalError

    try:
        yield
    except Exception as err:
        if not (isinstance(err, HorovodInternalError) or HOROVOD_SHUT_DOWN in str(err)):
            raise
        said = HOROVOD_SHUT_DOWN if HOROVOD_SHUT_DOWN in str(err) else first_sentence(err)
        raise RunFailed(f"Horovod stopped the job: {said} (another rank ended or stopped "
                        "answering)") from None


def prepare_run(hvd, rt: Runtime, config: RunConfig) -> tuple:
    """Every rank reads MNIST (the train and test splits), then rank 0 makes
    the output directories, so bad data leaves no directory behind; a failure
    anywhere stops all ranks."""
    splits = check_all_ranks(
        hvd.allgather_object, rt.rank,
        lambda: mnist.load_train_test(config.data.data_dir, download=not config.data.no_download),
        "data")
    n_train = len(splits[0])
    if n_train == 0:
        raise UserError(f"{n_train} training images cannot be shared by {rt.size} ranks")
    # A batch larger than the shard would train one partial batch an epoch
    # and end far below the accuracy the command suggests, without a word.
    shard = sharding.shard_size(n_train, rt.size)
    if config.schedule.batch_size > shard:
        raise UserError(f"--batch-size {config.schedule.batch_size} is larger than a rank's "
                        "shard: "
                        f"{n_train} training images over {rt.size} ranks are {shard} "
                        "per rank; use a smaller batch or fewer ranks")
    check_all_ranks(
        hvd.allgather_object, rt.rank,
        lambda: rt.is_root and outputs.prepare_output_dirs(config.outputs.log_dir,
                                                           config.outputs.checkpoint_dir),
        "dirs")
    return splits


def resume_on_root(hvd, rt: Runtime, restore) -> int:
    """Rank 0 runs restore() (which loads its checkpoint, if any, into its
    model and returns the epochs done); every rank learns the count, or the
    error. The caller then broadcasts rank 0's state."""
    epochs_done = check_all_ranks(hvd.allgather_object, rt.rank,
                                  lambda: restore() if rt.is_root else 0, "resume")
    return hvd.broadcast_object(epochs_done, root_rank=0, name="epochs_done")


def check_controller(use_adasum: bool, controller: str, framework: str) -> None:
    if use_adasum and controller != "mpi":
        raise UserError("--use-adasum needs the MPI controller (horovodrun --mpi): "
                        f"Horovod implements Adasum over MPI only ({framework})")


def digest(named_arrays: Iterable[tuple[str, np.ndarray]]) -> str:
    """SHA-256 over names and raw bytes of the weights, in the given order."""
    sha = hashlib.sha256()
    for name, array in named_arrays:
        sha.update(name.encode())
        sha.update(np.ascontiguousarray(array).tobytes())
    return sha.hexdigest()
