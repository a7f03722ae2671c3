"""What rank 0 reports: one JSON line and TensorBoard scalars per epoch, and a
summary of the whole run. Times follow the one definition that every
trainer's --help states (options.TIMES_EPILOG)."""

import collections
import datetime
import json
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from horovod_train.core.atomic import atomic_write_bytes
from horovod_train.core.console import say
from horovod_train.core.errors import RunFailed, UserError

METRICS_NAME = "metrics.jsonl"
SUMMARY_NAME = "summary.json"


class TensorBoardScalars:
    """Scalars in a TensorBoard event file, written with the tensorboard
    package alone: no framework's writer, since importing PyTorch into an
    MXNet process crashes it."""

    def __init__(self, log_dir: Path):
        log_dir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        path, copy = log_dir / name, 1
        while path.exists():  # the same process again within the second (an elastic reset)
            copy += 1
            path = log_dir / f"{name}.{copy}"
        # Unbuffered, as metrics.jsonl: nothing left to fail again at exit.
        self.file = open(path, "wb", buffering=0)  # noqa: SIM115 - closed by close()
        self.records = RecordWriter(self.file)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag,
                                                                       simple_value=value)])
        self._write(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def _write(self, event) -> None:
        self.records.write(event.SerializeToString())

    def close(self) -> None:
        self.file.close()


# The earlier runs' records, each set aside into a folder of its own when a
# new run starts in the same --log-dir: TensorBoard pointed at the log dir
# lists each run apart.
EARLIER_DIR = "earlier"
TENSORBOARD_DIR = "tensorboard"
# Lines every N batches (--log-interval) are scalars under this prefix, their
# step the batch counted from the run's start; the epochs' scalars count epochs.
BATCH_TAGS = "batch/"
# The log dirs this process opened: opened again (an elastic run after a
# reset) it is the same run going on, never a new one.
_OPENED: set[Path] = set()


class MetricsLog:
    """Per-epoch metrics as JSON lines and TensorBoard scalars, and with
    --log-interval a line every N batches. Only rank 0 makes one; the others
    pass enabled=False and it does nothing."""

    def __init__(self, log_dir: str | os.PathLike, enabled: bool, epochs_done: int = 0,
                 batches_per_epoch: int = 1):
        """A new run (no epoch done) sets an earlier run's records aside
        (set_aside_earlier); a run resumed after `epochs_done` epochs keeps
        their lines and scalars and drops any later one: a run stopped
        between an epoch's line and its checkpoint trains that epoch again,
        and logs it once."""
        self.enabled = enabled
        if not enabled:
            return
        log_dir = Path(log_dir)
        path = log_dir / METRICS_NAME
        mode = "ab"
        if epochs_done == 0 and log_dir.resolve() not in _OPENED:
            moved = set_aside_earlier(log_dir)
            if moved:
                say(f"the earlier run's records in {log_dir} moved to {moved}")
        elif epochs_done == 0:
            mode = "wb"  # an elastic reset before the first epoch's line: nothing to keep
            trim_events(log_dir / TENSORBOARD_DIR, 0, 0)
        elif path.exists():
            kept = [line for line in path.read_text().splitlines(keepends=True)
                    if line.endswith("\n") and json.loads(line)["epoch"] <= epochs_done]
            atomic_write_bytes(path, "".join(kept).encode())
            trim_events(log_dir / TENSORBOARD_DIR, epochs_done, epochs_done * batches_per_epoch)
        _OPENED.add(log_dir.resolve())
        log_dir.mkdir(parents=True, exist_ok=True)
        # Unbuffered: a line is on disk once written, and a write that fails
        # leaves nothing in a buffer to fail once more when the file closes.
        self.jsonl = open(path, mode, buffering=0)  # noqa: SIM115
        self.tensorboard = TensorBoardScalars(log_dir / TENSORBOARD_DIR)

    def log_epoch(self, record: dict) -> None:
        """Append the epoch's line and scalars. A write that fails (a full
        disk) is a one-line UserError naming the file; a line it cut short
        has no newline, and a resumed run drops it."""
        self._log(record, "", record["epoch"])

    def log_batch(self, record: dict, step: int) -> None:
        """A --log-interval line (its epoch, batch and loss) and its scalars at
        `step`, the batch counted from the run's start."""
        self._log(record, BATCH_TAGS, step)

    def _log(self, record: dict, tag_prefix: str, step: int) -> None:
        if not self.enabled:
            return
        record = {**record, "time_utc": utc_now()}
        try:
            line = memoryview((json.dumps(record, sort_keys=True) + "\n").encode())
            while line:  # a raw write may take part of the line; the rest fails if the disk is full
                line = line[self.jsonl.write(line):]
        except OSError as err:
            raise UserError(f"cannot write {self.jsonl.name}: {err.strerror or err}") from None
        try:
            for key, value in record.items():
                if key not in ("epoch", "batch") and isinstance(value, int | float):
                    self.tensorboard.add_scalar(tag_prefix + key, value, step)
        except OSError as err:
            raise UserError(f"cannot write {self.tensorboard.file.name}: "
                            f"{err.strerror or err}") from None

    def close(self) -> None:
        if self.enabled:
            self.jsonl.close()
            self.tensorboard.close()


def utc_now() -> str:
    """metrics.jsonl's timestamps: ISO 8601, UTC, to the millisecond."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def set_aside_earlier(log_dir: Path) -> Path | None:
    """Move an earlier run's metrics.jsonl, summary.json and TensorBoard
    events into LOG_DIR/earlier/<its last write, UTC>/; where it went, or
    None when there was none. Checkpoints stay (--resume reads them)."""
    records = [log_dir / name for name in (METRICS_NAME, SUMMARY_NAME, TENSORBOARD_DIR)
               if (log_dir / name).exists()]
    if not records:
        return None
    last_write = max(path.stat().st_mtime for path in records)
    stamp = datetime.datetime.fromtimestamp(last_write, datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    target = log_dir / EARLIER_DIR / stamp
    suffix = 1
    while target.exists():
        suffix += 1
        target = log_dir / EARLIER_DIR / f"{stamp}-{suffix}"
    try:
        target.mkdir(parents=True)
        for path in records:
            os.replace(path, target / path.name)
    except OSError as err:
        raise UserError(f"cannot set the earlier run's records in {log_dir} aside into "
                        f"{target}: {err.strerror or err}") from None
    return target


def read_records(path: Path) -> list[bytes]:
    """The records of an event file (TFRecord framing: a little-endian
    uint64 length, its CRC, the data, the data's CRC), read here since
    TensorBoard's own reader imports TensorFlow, which crashes an MXNet
    process. A record the writer cut short ends the list."""
    data, records, at = path.read_bytes(), [], 0
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        end = at + 12 + length + 4
        if end > len(data):
            break
        records.append(data[at + 12:at + 12 + length])
        at = end
    return records


def trim_events(directory: Path, epochs_done: int, batches_done: int) -> None:
    """Drop the scalars of epochs after `epochs_done` (and of batches after
    `batches_done`) from the event files in `directory`, so that a resumed
    run shows each epoch once. Each file is rewritten whole and replaced."""
    def kept(event) -> bool:
        tags = [value.tag for value in event.summary.value]
        if not tags:
            return True  # the file's version, and the like
        last = batches_done if tags[0].startswith(BATCH_TAGS) else epochs_done
        return event.step <= last

    for path in sorted(directory.glob("events.out.tfevents.*")):
        records = read_records(path)
        keep = [r for r in records if kept(event_pb2.Event.FromString(r))]
        if len(keep) == len(records):
            continue
        temporary = path.with_name(f".{path.name}.trim")
        with open(temporary, "wb") as out:
            writer = RecordWriter(out)
            for record in keep:
                writer.write(record)
        os.replace(temporary, path)


# How the first line names what summary.json's "versions" holds.
VERSION_NAMES = {"horovod": "Horovod", "open_mpi": "Open MPI", "cuda": "CUDA", "nccl": "NCCL"}


@dataclass(frozen=True)
class Announcement:
    """What the run's first line says; the training loop builds it."""
    framework: str
    model: str
    train_images: int
    test_images: int
    lr: float
    lr_scale: float
    epochs_done: int
    choices: str  # the trainer's own options, described
    versions: dict  # summary.json's "versions"
    settings: str  # what each rank set in its own process (runtime.brief_settings)


def announce(rt, run: Announcement) -> None:
    """The run's first line: what trains on what, where, with which versions
    and the settings each rank made in its own process."""
    if rt.is_root:
        # No launcher named an interface: the controller picks its own.
        network = f"network {rt.network or f'{rt.controller} chooses'}, " if rt.size > 1 else ""
        built = ", ".join(f"{VERSION_NAMES.get(name, name)} {version}"
                          for name, version in run.versions.items()
                          if version and name not in ("python", "commit"))
        say(f"training {run.framework} {run.model} on {run.train_images} images, testing on "
            f"{run.test_images}, {rt.size} ranks ({rt.controller}), {rt.device}, "
            f"{rt.threads} threads per rank, {network}lr {run.lr} x {run.lr_scale:g}"
            + (f", {run.choices}" if run.choices else "")
            + (f", resuming after epoch {run.epochs_done}" if run.epochs_done else "")
            + (f"; {built}" if built else "") + (f"; set: {run.settings}" if run.settings else ""))


def note_checkpoint(rt, path: Path, resume: bool) -> None:
    """One line where the checkpoint is not what the command might suggest:
    a fresh run about to replace one, or --resume finding none."""
    if not rt.is_root:
        return
    if resume and not path.exists():
        say(f"note: --resume found no checkpoint at {path}; starting from epoch 1")
    elif not resume and path.exists():
        say(f"note: starting over; {path} will be replaced (pass --resume to continue from it)")


def epoch_record(epoch: int, lr: float, train_sums: list[float], test_metrics: dict,
                 epoch_seconds: float) -> dict:
    """One epoch's line: train_sums are (loss sum, correct, count, images/s)
    summed over all ranks."""
    loss_sum, correct, count, rate = train_sums
    return {
        "epoch": epoch,
        "lr": lr,
        "train_loss": loss_sum / count,
        "train_accuracy": correct / count,
        **test_metrics,
        "images_per_sec": rate,
        "epoch_time_s": epoch_seconds,
    }


def format_batch(record: dict) -> str:
    """A --log-interval line: "epoch 1 [640/3750 batches, 17%] loss 0.412"."""
    return (f"epoch {record['epoch']} [{record['batch']}/{record['batches']} batches, "
            f"{100 * record['batch'] / record['batches']:.0f}%] loss {record['train_loss']:.4f}")


def format_epoch(record: dict) -> str:
    return (f"epoch {record['epoch']}: train loss {record['train_loss']:.4f} "
            f"acc {record['train_accuracy']:.4f} | test loss {record['test_loss']:.4f} "
            f"acc {record['test_accuracy']:.4f} | {record['images_per_sec']:.0f} images/s")


def rank_figures(runtime, images: int, step_seconds: float, train_seconds: float,
                 digest: str) -> dict:
    """What each rank contributes to the summary (gathered with
    allgather_object): its images, the seconds it spent in training steps
    and in training (options.TIMES_EPILOG)."""
    return {
        "rank": runtime.rank,
        "host": runtime.hostname,
        "local_rank": runtime.local_rank,
        "images": images,
        "step_time_s": step_seconds,
        "train_time_s": train_seconds,
        "images_per_sec": images / step_seconds if step_seconds else 0.0,
        "digest": digest,
    }


def build_summary(framework: str, model: str, runtime, ranks: list[dict], test_metrics: dict,
                  epochs: int, epochs_done: int, wall_seconds: float, config) -> dict:
    """The run's summary from every rank's figures; totals are sums over ranks.
    "nccl" is the PyTorch trainer's on GPUs (nccl_report.run_record), else null."""
    ranks = [dict(r) for r in ranks]
    digests = [r.pop("digest") for r in ranks]
    return {
        "framework": framework,
        "model": model,
        "size": runtime.size,
        "controller": runtime.controller,
        "network_interface": runtime.network,
        "device": runtime.device,
        "nccl": None,
        "hosts": dict(collections.Counter(r["host"] for r in ranks)),
        "ranks": ranks,
        "images_per_sec": sum(r["images_per_sec"] for r in ranks),
        "epochs": epochs,
        "resumed_after_epoch": epochs_done,
        **test_metrics,
        "step_time_s": max(r["step_time_s"] for r in ranks),
        "train_time_s": max(r["train_time_s"] for r in ranks),
        "wall_time_s": wall_seconds,
        "weights_identical": len(set(digests)) == 1,
        "weights_digest": digests[0],
        "rank_digests": digests,
        "options": config.as_record(),
    }


def finish_run(runtime, log_dir, summary: dict) -> dict:
    """Rank 0 writes and prints the summary; every rank fails if the ranks
    ended with different weights: a failed run (exit 1), not bad input."""
    if runtime.is_root:
        write_summary(log_dir, summary)
        say(format_summary(summary))
    if not summary["weights_identical"]:
        raise RunFailed("ranks ended with different weights: "
                        + ", ".join(sorted(set(summary["rank_digests"]))))
    return summary


def write_summary(log_dir: str | os.PathLike, summary: dict) -> Path:
    path = Path(log_dir) / SUMMARY_NAME
    atomic_write_bytes(path, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())
    return path


def format_summary(summary: dict) -> str:
    """The closing lines rank 0 prints."""
    per_rank = ", ".join(f"{r['images_per_sec']:.0f}" for r in summary["ranks"])
    hosts = ", ".join(f"{h}:{n}" for h, n in summary["hosts"].items())
    return "\n".join([
        f"test accuracy {summary['test_accuracy']:.4f}  test loss {summary['test_loss']:.4f}",
        f"{summary['images_per_sec']:.0f} images/s in total over {summary['size']} ranks "
        f"({per_rank} per rank), on {hosts}, controller {summary['controller']}",
        format_times(summary),
        "weights identical on all ranks: "
        + ("yes" if summary["weights_identical"] else "NO (digests differ)"),
    ])


def format_times(summary: dict) -> str:
    """Wall time split as options.TIMES_EPILOG defines its parts."""
    wall, train = summary["wall_time_s"], summary["train_time_s"]
    return (f"wall time {wall:.1f} s: {train:.1f} s training ({summary['step_time_s']:.1f} s "
            f"of it in steps), {wall - train:.1f} s start-up and summary")
