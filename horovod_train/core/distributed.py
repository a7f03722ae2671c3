"""What every trainer does across its ranks, whatever the framework: read
the data and make the outputs together, stop all ranks together on a user
error (or say in one line that Horovod ended the job), restore rank 0's
checkpoint for all, and fingerprint the weights. `hvd` is the framework's
Horovod module (horovod.torch, horovod.tensorflow or horovod.mxnet); all
share this API. The rank itself (its set-up and description) is runtime.py's."""

import contextlib
import hashlib
import re
import socket
from collections.abc import Iterable

import numpy as np

from horovod_train.core import mnist, outputs, phases, sharding
from horovod_train.core.config import Placement, RunConfig, validate
from horovod_train.core.errors import RunFailed, UserError
from horovod_train.core.runtime import Runtime


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
# Gloo's errors start with [file.cc:line], a path of the machine that built
# Horovod. PyTorch's HorovodInternalError starts with it; TensorFlow and MXNet
# wrap it in an error of their own, on a line of its text.
SOURCE_LOCATION = re.compile(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*")
GLOO_ERROR = re.compile(r"^\s*\[[^\]\s]*gloo[^\]\s]*\.(?:cc|cpp|h):\d+\]\s*(\S.*)$", re.M)
# MXNet reads Gloo's "[file.cc:line] Read error [ADDR]:PORT: reason" as a
# traceback of its own: File "Read error [ADDR]", line PORT, then
# MXNetError: reason.
MXNET_GLOO_ERROR = re.compile(
    r'File "((?:Read|Write) error \[[^\]]*\])", line (\d+)\s*\n\s*MXNetError: (\S.*)')


def gloo_error(text: str) -> str | None:
    """Gloo's error wherever the framework put it, without its source
    location; None where the text carries none."""
    if found := GLOO_ERROR.search(text):
        return found[1]
    if found := MXNET_GLOO_ERROR.search(text):
        return f"{found[1]}:{found[2]}: {found[3]}"
    return None


def first_sentence(err: BaseException) -> str:
    """An error of Horovod's, for a one-line message: the first sentence of
    Gloo's error wherever the framework put it, else of the error's text;
    without Gloo's source location."""
    text = gloo_error(str(err)) or str(err).strip() or type(err).__name__
    return SOURCE_LOCATION.sub("", text.splitlines()[0].split(". ")[0])


@contextlib.contextmanager
def one_line_when_horovod_stops():
    """Horovod ending the job under this rank (another rank ended or stopped
    answering) as one line, a RunFailed, instead of a traceback; horovodrun
    names the rank that ended first. PyTorch raises HorovodInternalError,
    TensorFlow and MXNet errors of their own whose text says so, or carries
    Gloo's error when the peer's connection broke before Horovod shut down.
    (An elastic run recovers inside, and gets here only when it cannot.)"""
    from horovod.common.exceptions import HorovodInternalError

    try:
        yield
    except Exception as err:
        text = str(err)
        if not (isinstance(err, HorovodInternalError) or HOROVOD_SHUT_DOWN in text
                or gloo_error(text)):
            raise
        said = HOROVOD_SHUT_DOWN if HOROVOD_SHUT_DOWN in text else first_sentence(err)
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
    phases.mark("data")
    return splits


def resume_on_root(hvd, rt: Runtime, restore) -> int:
    """Rank 0 runs restore() (which loads its checkpoint, if any, into its
    model and returns the epochs done); every rank learns the count, or the
    error. The caller then broadcasts rank 0's state."""
    epochs_done = check_all_ranks(hvd.allgather_object, rt.rank,
                                  lambda: restore() if rt.is_root else 0, "resume")
    return hvd.broadcast_object(epochs_done, root_rank=0, name="epochs_done")


def check_placement(config: RunConfig, rt: Runtime, on_gpu: bool) -> None:
    """config.validate again, now that the controller and the device are
    known; every rank finds the same, so each stops with the same line."""
    problem = validate(config, Placement(rt.controller, on_gpu))
    if problem:
        raise UserError(problem)


def digest(named_arrays: Iterable[tuple[str, np.ndarray]]) -> str:
    """SHA-256 over names and raw bytes of the weights, in the given order."""
    sha = hashlib.sha256()
    for name, array in named_arrays:
        sha.update(name.encode())
        sha.update(np.ascontiguousarray(array).tobytes())
    return sha.hexdigest()
