"""How a run that diverged must end (loop.py's stop at a loss that is not
finite), as the real runs check it: the job exits 1, rank 0 alone says the
one line, every rank exits 1, and the files the earlier, good run left are
byte for byte as they were (no checkpoint, metrics line or summary after the
bad step). The trainers' tests resume a good run at a rate that diverges:
--lr 1e30 makes the loss of the run's second step nan or inf."""

import re
from pathlib import Path

DIVERGING = ["--resume", "--lr", "1e30"]
# Rank 0's stderr under horovodrun: [0]<stderr>: over Gloo, [1,0]<stderr>: over MPI.
ROOT_STDERR = r"\[(?:\d+,)?0\]<stderr>:"


def earlier_outputs(log_dir: Path) -> dict[Path, bytes]:
    """The good run's files: its checkpoint, metrics and summary, as bytes."""
    paths = [*(log_dir / "checkpoints").iterdir(), log_dir / "metrics.jsonl",
             log_dir / "summary.json"]
    return {path: path.read_bytes() for path in paths}


# What the line asks to change, with --lr 1e30 and the default warm-up.
CHANGE = "Lower --lr (1e+30 in this run) or lengthen --warmup-epochs (1 in this run)"


def assert_stopped(returncode: int, output: str, prog: str, epoch: str,
                   earlier: dict[Path, bytes], change: str = CHANGE) -> str:
    """The job ended as a diverged run must, at `epoch` ("2/2"); its line."""
    assert returncode == 1, output[-3000:]
    lines = [line for line in output.splitlines() if "training diverged" in line]
    assert len(lines) == 1, output[-3000:]  # said once, by rank 0
    assert re.fullmatch(
        rf"{ROOT_STDERR}{re.escape(prog)}: error: training diverged: loss (nan|inf) at epoch "
        rf"{epoch}, step \d+/\d+ \(learning rate [^)]+\); stopped there, the checkpoint after "
        rf"epoch \d+ is kept as it was\. {re.escape(change)}", lines[0]), lines[0]
    assert "Traceback" not in "\n".join(line for line in output.splitlines()
                                        if re.match(r"\[[\d,]+\]<std", line))  # the ranks'
    assert "Exit code: 1" in output or "Exit code:    1" in output  # the rank's: a run failed
    assert {path: path.read_bytes() for path in earlier} == earlier
    return lines[0]
