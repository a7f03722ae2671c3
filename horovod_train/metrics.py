"""What rank 0 reports: a progress bar, one JSON line and TensorBoard scalars
per epoch, and a summary of the whole run."""

import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from horovod_train.atomic import atomic_write_bytes

METRICS_NAME = "metrics.jsonl"
SUMMARY_NAME = "summary.json"


def progress(total: int, description: str, enabled: bool) -> tqdm:
    # horovodrun forwards '\r' updates line by line, so the bar stays readable
    # behind its [rank]<stderr> prefixes.
    return tqdm(total=total, desc=description, unit="batch", disable=not enabled,
                file=sys.stderr, mininterval=1.0, dynamic_ncols=False, ncols=100)


class MetricsLog:
    """Per-epoch metrics as JSON lines and TensorBoard scalars. Only rank 0
    makes one; the others pass enabled=False and it does nothing."""

    def __init__(self, log_dir: str | os.PathLike, enabled: bool, append: bool):
        self.enabled = enabled
        self.jsonl = None
        self.tensorboard = None
        if not enabled:
            return
        log_dir = Path(log_dir)
        self.jsonl = open(log_dir / METRICS_NAME, "a" if append else "w")  # noqa: SIM115
        # Imported here: TensorBoard's writer is slow to import and rank 0 alone needs it.
        from torch.utils.tensorboard import SummaryWriter

        self.tensorboard = SummaryWriter(str(log_dir / "tensorboard"))

    def log_epoch(self, record: dict) -> None:
        if not self.enabled:
            return
        self.jsonl.write(json.dumps(record, sort_keys=True) + "\n")
        self.jsonl.flush()
        for key, value in record.items():
            if key != "epoch" and isinstance(value, int | float):
                self.tensorboard.add_scalar(key, value, record["epoch"])
        self.tensorboard.flush()

    def close(self) -> None:
        if self.enabled:
            self.jsonl.close()
            self.tensorboard.close()


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
        f"wall time {summary['wall_time_s']:.1f} s (training {summary['train_time_s']:.1f} s)",
        "weights identical on all ranks: "
        + ("yes" if summary["weights_identical"] else "NO (digests differ)"),
    ])
