"""Time to accuracy: how long the PyTorch trainer takes to reach a test
accuracy (98% by default) on the real digits, with a named preset of the
trainer (fast-mnist by default, the fastest configuration found), and where
the rest of the command's time goes.

The data are the 10,000 real MNIST test digits (mnist-t10k): the first 8,000
train, the last 2,000 test, written once into a temporary directory. Each
run is the command a user types, `horovodrun -np 2 -H localhost:2 python
horovod_train/pytorch_mnist.py --preset fast-mnist` (plain `python` for
--np 1; with --emulate the two-host command, `horovodrun -np 4 -H a:2,b:2`,
started on emulated host a), with --target-accuracy, which stops after the
first epoch reaching it; once per controller of --controllers, the
controllers taking turns run by run. For each run:

- command_to_answer_s: from starting the command to the line saying the
  target was reached, what a user waits for; command_wall_s, to its exit;
- time_to_target_s: the trainer's own, from its first step to the end of
  that epoch's evaluation;
- parts: the command in three, before the first step (the launcher, Python,
  imports, Horovod's start, the data: each in `phases`, from the trainer's
  own stamps), training (first step to the answer line) and after the
  answer (the answer line to the command's exit).

--floors also times, side by side, what no trainer can beat on this
machine: `horovodrun -np N -H localhost:N true`, `python -c 'import
torch'`, and Horovod's start alone over each controller (`python -c
'import torch, horovod.torch as hvd; hvd.init()'` under horovodrun).

    python benchmarks/time_to_accuracy.py --repeats 5 --floors --json tta.json
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

from benchmarks import CHECKOUT, as_typed, venv_env
from benchmarks.machine import machine_record
from horovod_train.core import mnist, options
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.torch.presets import PRESETS, describe_preset

PROG = "time_to_accuracy.py"
CONTROLLERS = ("gloo", "mpi")
EMULATE = CHECKOUT / "scripts" / "emulate_cluster.sh"
TRAINER = CHECKOUT / "horovod_train" / "pytorch_mnist.py"
# Where the trainer downloads MNIST (python -m horovod_train.mnist download data).
DEFAULT_SOURCE = Path(os.environ.get("HVT_MNIST_T10K_DIR", mnist.raw_dir(CHECKOUT / "data")))
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
    parser.add_argument("--controllers", type=options.names_from(CONTROLLERS),
                        default=list(CONTROLLERS),
                        help="horovodrun's controllers to time, in turns (default gloo,mpi)")
    parser.add_argument("--emulate", action="store_true",
                        help="the two-host command instead (-np 4 -H a:2,b:2), started on the "
                             "emulated host a (scripts/emulate_cluster.sh up first)")
    parser.add_argument("--floors", action="store_true",
                        help="also time the floors: horovodrun starting `true`, Python "
                             "importing torch, Horovod's start over each controller")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the settings and every run's figures here as JSON")
    parser.add_argument("trainer_args", nargs="*", metavar="-- TRAINER_ARGS",
                        help="more options for the trainer, after --")
    args = parser.parse_args(argv)
    if args.emulate and args.np != 2:
        parser.error("--emulate runs the two-host command (-np 4 -H a:2,b:2): drop --np")
    if args.np == 1:
        args.controllers = [None]  # one plain process: no launcher, no controller
    return args


def launcher(args: argparse.Namespace, controller: str | None) -> list[str]:
    """horovodrun with this run's ranks and controller, as typed; or nothing (--np 1)."""
    if controller is None:
        return []
    horovodrun = str(Path(sys.executable).parent / "horovodrun")
    if args.emulate:
        return [str(EMULATE), "exec", "a", "--", horovodrun, "-np", "4", "-H", "a:2,b:2",
                f"--{controller}"]
    return [horovodrun, "-np", str(args.np), "-H", f"localhost:{args.np}", f"--{controller}"]


def trainer_command(args: argparse.Namespace, controller: str | None, data_dir: Path,
                    log_dir: Path) -> list[str]:
    return [*launcher(args, controller), sys.executable, str(TRAINER), "--preset", args.preset,
            "--data-dir", str(data_dir), "--no-download", "--no-progress",
            "--log-dir", str(log_dir), "--target-accuracy", str(args.target_accuracy),
            *args.trainer_args]


def floor_commands(args: argparse.Namespace) -> dict[str, list[str]]:
    """What no trainer run can beat here: the launcher starting nothing,
    Python importing torch, and Horovod's start over each controller."""
    commands = {"import_torch": [sys.executable, "-c", "import torch"]}
    for controller in filter(None, args.controllers):
        commands.setdefault("launcher_true", [*launcher(args, controller), "true"])
        commands[f"horovod_start_{controller}"] = [
            *launcher(args, controller), sys.executable, "-c",
            "import torch, horovod.torch as hvd; hvd.init()"]
    return commands


def time_command(command: list[str]) -> float:
    env = venv_env()
    started = time.perf_counter()
    result = subprocess.run(command, cwd=CHECKOUT, env=env, capture_output=True, text=True,
                            timeout=300)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).strip().splitlines() or ["no output"]
        raise RunFailed(f"{' '.join(command[-3:])} exited {result.returncode}: {lines[-1]}")
    return seconds


def with_path_names(text: str, data_dir: Path, log_dir: Path) -> str:
    """`text` with DATA_DIR and LOG_DIR for this run's temporary paths."""
    return text.replace(str(data_dir), "DATA_DIR").replace(str(log_dir), "LOG_DIR")


ANSWER = "reached test accuracy"  # the trainer's line when the target is reached


def run_trainer(command: list[str], work: Path) -> tuple[dict, dict]:
    """One run: its summary.json and the command's clocks; or the
    trainer's own error line, as bad input when the trainer refused its
    options or data (its exit 2), else as a failed run."""
    env = venv_env()
    answer_s, stdout = None, []
    # stderr to a file: reading stdout line by line must not leave a full
    # stderr pipe blocking the ranks.
    with open(work / "stderr.txt", "w+") as stderr:
        started_unix = time.time()
        started = time.perf_counter()
        with subprocess.Popen(command, cwd=CHECKOUT, env=env, stdout=subprocess.PIPE,
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
        # A rank's exit 2 is bad input; over Gloo horovodrun itself exits 1
        # and names the rank's code ("Process 0 exit with status code 2.").
        output = stderr_text + "".join(stdout)
        bad_input = process.returncode == 2 or "exit with status code 2." in output
        failure = UserError if bad_input else RunFailed
        raise failure(f"the trainer failed (exit {process.returncode}): "
                      f"{errors[-1].split('error: ', 1)[-1]}")
    return (json.loads((log_dir / "summary.json").read_text()),
            {"command_to_answer_s": answer_s, "command_wall_s": wall_s,
             "started_unix": started_unix})


# The parts before the first step, each from the previous stamp (phases.ORDER).
# launch: the command to rank 0's process; options: Python and the options
# parsed; imports: torch, the trainer's modules, Horovod's;
# horovod: hvd.init(); data: MNIST read and checked, the output directories;
# setup: the model, its broadcast, to the first step.
BEFORE_FIRST_STEP = (("launch_s", None), ("options_s", "options"), ("imports_s", "imports"),
                     ("horovod_s", "horovod"), ("data_s", "data"), ("setup_s", "first_step"))


def parts(phases: dict, clocks: dict) -> dict:
    """The command in three (before the first step, training, after the
    answer) and the first in its phases: the launcher's clock and rank 0's
    stamps (summary.json's phases) set side by side."""
    start = phases["process_start_unix"] - clocks["started_unix"]  # the launcher's part
    first_step = start + phases["first_step"]
    answer = clocks["command_to_answer_s"]
    split = {"before_first_step_s": first_step,
             "training_s": None if answer is None else answer - first_step,
             "after_answer_s": None if answer is None else clocks["command_wall_s"] - answer}
    previous = 0.0
    for name, stamp in BEFORE_FIRST_STEP:
        at = start if stamp is None else start + phases[stamp]
        split[name] = at - previous
        previous = at
    return split


def run_figures(summary: dict, clocks: dict) -> dict:
    figures = {key: clocks[key] for key in ("command_to_answer_s", "command_wall_s")}
    return {**figures, **{key: summary[key] for key in (
        "target_reached_epoch", "time_to_target_s", "test_accuracy", "epochs", "train_time_s",
        "wall_time_s", "images_per_sec", "device", "size", "controller")},
            "parts": parts(summary["phases"], clocks)}


def median_of(values: list) -> float | None:
    return None if None in values else statistics.median(values)


def variant_record(controller: str | None, command: list[str], runs: list[dict]) -> dict:
    """One launch's runs and their medians."""
    reached = all(r["target_reached_epoch"] for r in runs)
    return {
        "controller": controller,
        "command": command,
        "reached": reached,
        "command_to_answer_s": median_of([r["command_to_answer_s"] for r in runs])
        if reached else None,
        "command_wall_s": median_of([r["command_wall_s"] for r in runs]),
        "time_to_target_s": median_of([r["time_to_target_s"] for r in runs])
        if reached else None,
        "parts": {key: median_of([r["parts"][key] for r in runs]) for key in runs[0]["parts"]},
        "runs": runs,
    }


def format_record(record: dict) -> str:
    lines = [f"time to accuracy, preset {record['preset']} ({record['preset_options']}"
             + (" " + " ".join(record["trainer_args"]) if record["trainer_args"] else "")
             + f"), {record['ranks']} rank(s), {N_TRAIN} training digits, {N_TEST} test:"]
    for variant in record["variants"]:
        name = variant["controller"] or "one process"
        if variant["reached"]:
            p = variant["parts"]
            lines.append(
                f"  {name}: {variant['command_to_answer_s']:.1f} s from the command to "
                f"{record['target_accuracy']:.0%} test accuracy, "
                f"{variant['time_to_target_s']:.1f} s of it training (medians); "
                f"{p['before_first_step_s']:.2f} s before the first step (launch "
                f"{p['launch_s']:.2f}, options {p['options_s']:.2f}, imports {p['imports_s']:.2f}, "
                f"horovod {p['horovod_s']:.2f}, data {p['data_s']:.2f}, setup "
                f"{p['setup_s']:.2f}), {p['training_s']:.2f} s training, "
                f"{p['after_answer_s']:.2f} s after the answer")
        else:
            lines.append(f"  {name}: did not reach {record['target_accuracy']:.0%} test accuracy "
                         "in every run")
        lines.append(f"    command: {' '.join(variant['command'])}")
    if record["floors"]:
        lines.append("  floors (medians): " + ", ".join(
            f"{name} {seconds:.2f} s" for name, seconds in record["floors"].items()))
    return "\n".join(lines)


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
    runs = {controller: [] for controller in args.controllers}
    floors = {}
    with tempfile.TemporaryDirectory(prefix="time-to-accuracy-") as work:
        data_dir, log_dir = Path(work) / "mnist", Path(work) / "run"
        mnist.write_subset(args.source, data_dir, N_TRAIN, N_TEST)
        commands = {c: trainer_command(args, c, data_dir, log_dir) for c in args.controllers}
        floor_timings = {name: [] for name in floor_commands(args)} if args.floors else {}
        summaries = []
        for _ in range(args.repeats):
            # The controllers (and the floors) take turns, so that a slow
            # spell of a shared machine falls on each.
            for controller, command in commands.items():
                shutil.rmtree(log_dir, ignore_errors=True)
                summary, clocks = run_trainer(command, Path(work))
                summaries.append(summary)
                runs[controller].append(run_figures(summary, clocks))
            for name, command in floor_commands(args).items() if args.floors else ():
                floor_timings[name].append(time_command(command))
        floors = {name: statistics.median(values) for name, values in floor_timings.items()}
        names = {data_dir: "DATA_DIR", log_dir: "LOG_DIR"}
        variants = [variant_record(c, as_typed(commands[c], names), runs[c])
                    for c in args.controllers]
    reached = all(v["reached"] for v in variants)
    record = {
        "benchmark": "time_to_accuracy",
        "preset": args.preset,
        "preset_options": describe_preset(args.preset),
        "trainer_args": args.trainer_args,
        "target_accuracy": args.target_accuracy,
        "ranks": 4 if args.emulate else args.np,
        "hosts": "a:2,b:2 (emulated)" if args.emulate else "this machine",
        # The source directory's name only: results travel, machine paths do not.
        "data": {"source": args.source.name, "train": N_TRAIN, "test": N_TEST},
        "reached": reached,
        "variants": variants,
        "floors": floors,
        "options": {key: with_path_names(value, data_dir, log_dir) if isinstance(value, str)
                    else value for key, value in summaries[0]["options"].items()},
    }
    print(format_record(record), flush=True)
    if args.json:

        atomic_write_json(args.json, {**record, "machine": machine_record()})
    return 0 if reached else 1


def cli() -> None:
    """The command's entry (benchmarks/time_to_accuracy.py)."""
    run_main(main)


if __name__ == "__main__":
    cli()
