"""MNIST epoch times of the trainers in two or more environments side by
side: the same trainer, digits, ranks and epochs in each venv, in turns
(A, B, A, B, ...) so that other load on the machine slows them alike. For
a framework upgrade: the venv of the old lock against the new one's.

    python -m benchmarks.epoch_times --venvs OLD_VENV,.venv --data-dir DATA
    python -m benchmarks.epoch_times --venvs A,B --frameworks tensorflow --epochs 4 \\
        --repeats 3 --json runs/epoch-times.json
    python -m benchmarks.epoch_times --frameworks tensorflow \\
        --venvs .venv,.venv@TF_USE_LEGACY_KERAS=1 --data-dir DATA

A venv may carry settings for its runs' environment after an @ each
(VENV@NAME=VALUE@NAME=VALUE): the same venv twice compares two settings.

Each run is `VENV/bin/horovodrun -np N -H localhost:N VENV/bin/python
horovod_train/TRAINER --epochs E` from this checkout, on the CPU. Its
figure is the median of its epochs' `epoch_time_s` (metrics.jsonl) from
the second on (the first traces and warms up); a venv's figure is the
median of its runs'. The table is printed last: each venv's framework
version, seconds per epoch, final test accuracy, and its ratio to the
first venv's; --json writes the same with the machine (atomically).
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import CHECKOUT, as_typed
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main

PROG = "epoch_times"
TRAINERS = {  # framework: (trainer, the module whose version is reported)
    "pytorch": ("horovod_train/pytorch_mnist.py", "torch"),
    "tensorflow": ("horovod_train/tensorflow2_mnist.py", "tensorflow"),
    "mxnet": ("horovod_train/mxnet_mnist.py", "mxnet"),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=f"python -m benchmarks.{PROG}", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venvs", required=True,
                        help="comma-separated virtual environments, the first the baseline")
    parser.add_argument("--frameworks", default="pytorch,tensorflow",
                        help=f"comma-separated: {', '.join(TRAINERS)} (default pytorch,tensorflow)")
    parser.add_argument("--data-dir", type=Path, required=True,
                        help="MNIST's files (the trainer's --data-dir; nothing is downloaded)")
    parser.add_argument("--np", type=int, default=2, help="ranks on this machine (default 2)")
    parser.add_argument("--epochs", type=int, default=3,
                        help="epochs per run, at least 2: the first is not timed (default 3)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per venv (default 2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("trainer_args", nargs=argparse.REMAINDER,
                        help="after --, options every trainer run gets (e.g. -- --batch-size 128)")
    args = parser.parse_args(argv)
    args.venvs = [v for v in args.venvs.split(",") if v]
    args.frameworks = [f for f in args.frameworks.split(",") if f]
    for item in args.venvs:
        venv, settings = venv_and_settings(item)
        if not (venv / "bin" / "horovodrun").is_file():
            parser.error(f"--venvs: {venv} has no bin/horovodrun (set it up with "
                         "scripts/setup.sh --venv DIR)")
        if any("=" not in s or not s.split("=")[0] for s in settings):
            parser.error(f"--venvs: {item}: settings are @NAME=VALUE")
    if len({label(item) for item in args.venvs}) != len(args.venvs):
        parser.error("--venvs names one environment twice (by its folder's name and settings)")
    unknown = [f for f in args.frameworks if f not in TRAINERS]
    if unknown or not args.frameworks:
        parser.error(f"--frameworks takes {', '.join(TRAINERS)}; got {','.join(unknown) or 'none'}")
    if not args.data_dir.is_dir():
        parser.error(f"--data-dir: {args.data_dir} is not a directory")
    if args.epochs < 2 or args.np < 1 or args.repeats < 1:
        parser.error("--epochs takes 2 or more, --np and --repeats 1 or more")
    if args.trainer_args[:1] == ["--"]:
        args.trainer_args = args.trainer_args[1:]
    return args


def venv_and_settings(item: str) -> tuple[Path, list[str]]:
    """'VENV@NAME=VALUE@...' -> the venv and its NAME=VALUE settings."""
    venv, *settings = item.split("@")
    return Path(venv), settings


def label(item: str) -> str:
    """What the table and the JSON call a venv: its folder's name and its
    settings (no path of the machine it ran on)."""
    venv, settings = venv_and_settings(item)
    return "@".join([venv.resolve().name if venv.name in ("", ".", "..") else venv.name,
                     *settings])


def framework_version(venv: Path, module: str) -> str:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {module}; print({module}.__version__)"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.returncode != 0:
        raise RunFailed(f"{module} does not import in {venv}: "
                        + (result.stderr.strip().splitlines() or ["?"])[-1])
    return result.stdout.strip().splitlines()[-1]


def one_run(args: argparse.Namespace, item: str, framework: str) -> dict:
    """One run's median epoch time (epochs 2 on) and its last test accuracy."""
    trainer = TRAINERS[framework][0]
    venv, settings = venv_and_settings(item)
    with tempfile.TemporaryDirectory(prefix="epoch-times-") as log_dir:
        command = [str(venv / "bin" / "horovodrun"), "-np", str(args.np),
                   "-H", f"localhost:{args.np}", str(venv / "bin" / "python"), trainer,
                   "--data-dir", str(args.data_dir), "--no-download", "--no-cuda",
                   "--epochs", str(args.epochs), "--log-dir", log_dir, "--no-progress",
                   *args.trainer_args]
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
               **dict(s.split("=", 1) for s in settings)}
        env.pop("VIRTUAL_ENV", None)
        try:
            result = subprocess.run(command, cwd=CHECKOUT, env=env, capture_output=True,
                                    text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{framework} in {item} ran past --timeout {args.timeout:.0f} s") \
                from None
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            raise RunFailed(f"{framework} in {item} exited {result.returncode}: "
                            + " | ".join(tail))
        epochs = [json.loads(line) for line in Path(log_dir, "metrics.jsonl").read_text()
                  .splitlines() if '"epoch_time_s"' in line]
        summary = json.loads(Path(log_dir, "summary.json").read_text())
    return {"epoch_s": statistics.median(e["epoch_time_s"] for e in epochs[1:]),
            "test_accuracy": epochs[-1]["test_accuracy"],
            "weights_identical": summary["weights_identical"]}


def table(args: argparse.Namespace, results: dict) -> str:
    lines = [f"MNIST epoch times, {args.np} ranks, CPU, epochs 2-{args.epochs}, median of "
             f"{args.repeats} runs",
             "| framework | venv | version | s per epoch | ratio | test accuracy |",
             "| --- | --- | --- | --- | --- | --- |"]
    for framework, by_venv in results.items():
        base = by_venv[label(args.venvs[0])]["epoch_s"]
        for venv, figures in by_venv.items():
            lines.append(f"| {framework} | {venv} | {figures['version']} | "
                         f"{figures['epoch_s']:.2f} | {figures['epoch_s'] / base:.2f} | "
                         f"{100 * figures['test_accuracy']:.2f}% |")
    return "\n".join(lines) + "\n"


def main() -> int:
    args = parse_args(sys.argv[1:])
    from benchmarks.machine import machine_record  # after the checks: it asks git

    results: dict[str, dict[str, dict]] = {}
    for framework in args.frameworks:
        module = TRAINERS[framework][1]
        runs = {item: [] for item in args.venvs}
        versions = {item: framework_version(venv_and_settings(item)[0], module)
                    for item in args.venvs}
        for repeat in range(args.repeats):
            for item in args.venvs:
                run = one_run(args, item, framework)
                print(f"{framework} {item} ({versions[item]}) run {repeat + 1}: "
                      f"{run['epoch_s']:.2f} s per epoch, test accuracy "
                      f"{100 * run['test_accuracy']:.2f}%", file=sys.stderr, flush=True)
                runs[item].append(run)
        results[framework] = {
            label(item): {"version": versions[item],
                          "epoch_s": statistics.median(r["epoch_s"] for r in item_runs),
                          "test_accuracy": item_runs[-1]["test_accuracy"], "runs": item_runs}
            for item, item_runs in runs.items()}
    report = table(args, results)
    if args.json:
        names = {args.data_dir.resolve(): "DATA_DIR"}
        typed = f"python -m benchmarks.{PROG} " + shlex.join(
            as_typed([str(Path(a).resolve()) if Path(a).exists() else a
                      for a in sys.argv[1:]], names))
        for item in args.venvs:  # each venv by its label, not its path here
            typed = typed.replace(item, label(item))
        try:
            atomic_write_json(args.json, {"benchmark": PROG, "command": typed,
                                          "np": args.np, "epochs": args.epochs,
                                          "repeats": args.repeats, "results": results,
                                          "machine": machine_record()})
        except OSError as err:
            raise UserError(f"--json: {err.filename}: {err.strerror or err}") from None
    print(report, end="", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main, prog=PROG)
