"""Time to accuracy: how long the PyTorch trainer takes to reach a test
accuracy (98% by default) on the real digits, with a named preset of the
trainer (fast-mnist by default, the fastest configuration found).

The data are the 10,000 real MNIST test digits (mnist-t10k): the first 8,000
train, the last 2,000 test, written once into a temporary directory. Each
run is the command a user types, `horovodrun -np 2 -H localhost:2 python
horovod_train/pytorch_mnist.py --preset fast-mnist` (plain `python` for
--np 1), with --target-accuracy, which stops after the first epoch reaching
it. Two clocks are reported for each run:

- command_to_answer_s: from starting the command to the line saying the
  target was reached, what a user waits for; with it command_wall_s, to the
  command's exit;
- time_to_target_s: the trainer's own, from its first step to the end of
  that epoch's evaluation (process start, imports, data loading left out;
  the evaluations and checkpoints of the epochs before are in).

    python benchmarks/time_to_accuracy.py --repeats 5 --json tta.json
    python benchmarks/time_to_accuracy.py --np 1 -- --batch-size 64 --lr 0.05

Options after `--` go to the trainer (they override the preset). Exit
status 1 when a run did not reach the target within its epochs.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from horovod_train.core import mnist, options
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.torch.presets import PRESETS, describe_preset

REPO = Path(__file__).resolve().parents[2]  # the checkout

PROG = "time_to_accuracy.py"
TRAINER = REPO / "horovod_train" / "pytorch_mnist.py"
# Where the trainer downloads MNIST (python -m horovod_train.mnist download data).
DEFAULT_SOURCE = Path(os.environ.get("HVT_MNIST_T10K_DIR", mnist.raw_dir(REPO / "data")))
N_TRAIN, N_TEST = 8000, 2000


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help="directory holding t10k-images-idx3-ubyte[.gz] and "
                             "t10k-labels-idx1-ubyte[.gz] (default: $HVT_MNIST_T10K_DIR, else "
                             "data/MNIST/raw of the checkout, where `python -m "
                             "horovod_train.mnist download data` puts them)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="fast-mnist",
                        help="the trainer's preset (default fast-mnist)")
    parser.add_argument("--target-accuracy", type=options.fraction, default=0.98,
                        help="test accuracy to reach (default 0.98)")
    parser.add_argument("--repeats", type=options.positive_int, default=1,
                        help="runs, one after the other; the figure is their median "
                             "(default 1)")
    parser.add_argument("--np", type=options.positive_int, default=2,
                        help="ranks under horovodrun on this machine; 1 runs the trainer "
                             "as one plain process (default 2)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the settings and every run's figures here as JSON")
    parser.add_argument("trainer_args", nargs="*", metavar="-- TRAINER_ARGS",
                        help="more options for the trainer, after --")
    return parser.parse_args(argv)


def trainer_command(args: argparse.Namespace, data_dir: Path, log_dir: Path) -> list[str]:
    bin_dir = Path(sys.executable).parent
    launch = ([] if args.np == 1 else
              [str(bin_dir / "horovodrun"), "-np", str(args.np), "-H", f"localhost:{args.np}"])
    return [*launch, sys.executable, str(TRAINER), "--preset", args.preset,
            "--data-dir", str(data_dir), "--no-download", "--no-progress",
            "--log-dir", str(log_dir), "--target-accuracy", str(args.target_accuracy),
            *args.trainer_args]


def with_path_names(text: str, data_dir: Path, log_dir: Path) -> str:
    """`text` with DATA_DIR and LOG_DIR for this run's temporary paths."""
    return text.replace(str(data_dir), "DATA_DIR").replace(str(log_dir), "LOG_DIR")


def as_typed(command: list[str], data_dir: Path, log_dir: Path) -> list[str]:
    """The command as a user types it: names for this run's own paths."""
    programs = {sys.executable: "python", str(TRAINER): "horovod_train/pytorch_mnist.py",
                str(Path(sys.executable).parent / "horovodrun"): "horovodrun"}
    return [programs.get(part) or with_path_names(part, data_dir, log_dir) for part in command]


ANSWER = "reached test accuracy"  # the trainer's line when the target is reached


def run_trainer(command: list[str], work: Path) -> tuple[dict, dict]:
    """One run: its summary.json and the command's two clocks; or the
    trainer's own error line, as bad input when the trainer refused its
    options or data (its exit 2), else as a failed run."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    answer_s, stdout = None, []
    # stderr to a file: reading stdout line by line must not leave a full
    # stderr pipe blocking the ranks.
    with open(work / "stderr.txt", "w+") as stderr:
        started = time.perf_counter()
        with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=stderr, text=True) as process:
            for line in process.stdout:
                if answer_s is None and ANSWER in line:
                    answer_s = time.perf_counter() - started
                stdout.append(line)
        wall_s = time.perf_counter() - started
        stderr.seek(0)
        stderr_text = stderr.read()
    log_dir = Path(command[command.index("--log-dir") + 1])
    if process.returncode != 0 or not (log_dir / "summary.json").is_file():
        lines = [line for line in (stderr_text + "".join(stdout)).splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line] or lines[-1:] or ["no output"]
        failure = UserError if process.returncode == 2 else RunFailed
        raise failure(f"the trainer failed (exit {process.returncode}): "
                      f"{errors[-1].split('error: ', 1)[-1]}")
    return (json.loads((log_dir / "summary.json").read_text()),
            {"command_to_answer_s": answer_s, "command_wall_s": wall_s})


def run_figures(summary: dict, clocks: dict) -> dict:
    return {**clocks, **{key: summary[key] for key in (
        "target_reached_epoch", "time_to_target_s", "test_accuracy", "epochs", "train_time_s",
        "wall_time_s", "images_per_sec", "device", "size")}}


def median_of(runs: list[dict], key: str) -> float | None:
    values = [run[key] for run in runs]
    return None if None in values else statistics.median(values)


def format_record(record: dict) -> str:
    runs = ", ".join(
        f"{r['command_to_answer_s']:.1f} s command to answer, {r['time_to_target_s']:.1f} s "
        f"of training (epoch {r['target_reached_epoch']}, {r['test_accuracy']:.4f})"
        if r["target_reached_epoch"] else f"not reached ({r['test_accuracy']:.4f})"
        for r in record["runs"])
    headline = (f"{record['command_to_answer_s']:.1f} s from the command to "
                f"{record['target_accuracy']:.0%} test accuracy, "
                f"{record['time_to_target_s']:.1f} s of it training (medians)"
                if record["reached"] else
                f"did not reach {record['target_accuracy']:.0%} test accuracy in every run")
    return (f"time to accuracy, preset {record['preset']} ({record['preset_options']}"
            + (" " + " ".join(record["trainer_args"]) if record["trainer_args"] else "")
            + f"), {record['ranks']} rank(s), {N_TRAIN} training digits, {N_TEST} test:\n"
            f"  {headline}\n  command: {' '.join(record['command'])}\n"
            f"  runs: {runs}")


def check_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {path}: {path.parent} is not writable")


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.json:
        check_writable(args.json)  # now, not after minutes of training
    with tempfile.TemporaryDirectory(prefix="time-to-accuracy-") as work:
        data_dir, log_dir = Path(work) / "mnist", Path(work) / "run"
        mnist.write_subset(args.source, data_dir, N_TRAIN, N_TEST)
        command = trainer_command(args, data_dir, log_dir)
        summaries, runs = [], []
        for _ in range(args.repeats):
            shutil.rmtree(log_dir, ignore_errors=True)
            summary, clocks = run_trainer(command, Path(work))
            summaries.append(summary)
            runs.append(run_figures(summary, clocks))
    reached = all(r["target_reached_epoch"] for r in runs)
    record = {
        "benchmark": "time_to_accuracy",
        "preset": args.preset,
        "preset_options": describe_preset(args.preset),
        "trainer_args": args.trainer_args,
        "target_accuracy": args.target_accuracy,
        "ranks": args.np,
        # The source directory's name only: results travel, machine paths do not.
        "data": {"source": args.source.name, "train": N_TRAIN, "test": N_TEST},
        "command": as_typed(command, data_dir, log_dir),
        "reached": reached,
        "command_to_answer_s": median_of(runs, "command_to_answer_s") if reached else None,
        "command_wall_s": median_of(runs, "command_wall_s"),
        "time_to_target_s": median_of(runs, "time_to_target_s") if reached else None,
        "runs": runs,
        "options": {key: with_path_names(value, data_dir, log_dir) if isinstance(value, str)
                    else value for key, value in summaries[0]["options"].items()},
    }
    print(format_record(record), flush=True)
    if args.json:
        atomic_write_json(args.json, record)
    return 0 if reached else 1



def cli() -> None:
    """The command's entry (benchmarks/time_to_accuracy.py)."""
    run_main(main)


if __name__ == "__main__":
    cli()
