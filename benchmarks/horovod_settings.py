"""What Horovod's and Open MPI's settings do to the training step, side by
side on this machine: the same timed steps (`pytorch_mnist.py
--benchmark-steps`, as benchmarks/run_matrix.sh times them) under
`horovodrun -np N -H localhost:N`, once per variant, the variants taking
turns run by run so that other load on the machine falls on all alike; each
figure is the median of a variant's runs.

    python benchmarks/horovod_settings.py --data-dir data --json settings.json
    python benchmarks/horovod_settings.py --variants spin,yield -- --model resnet18 \\
        --synthetic --image-size 32 --batch-size 32

Variants (--variants, comma-separated; default: all):
  spin         MPI controller, Open MPI waiting as it does by default, by
               spinning (OMPI_MCA_mpi_yield_when_idle=0)
  yield        MPI controller, the trainers' default: Open MPI yields its
               core while it waits (runtime.RANK_MPI_SETTINGS)
  gloo         the Gloo controller (horovodrun --gloo)
  cycle-5ms    as yield, Horovod's cycle time 5 ms instead of its 1 ms
  cycle-0.5ms  as yield, 0.5 ms
  glibc-malloc as yield, with glibc's own malloc behaviour instead of the
               trainers' (horovod_train/torch/allocator.py)
  fusion-128mb as yield, with horovodrun's 128 MB fusion buffer instead of
               the trainers' 4 MB for CPU tensors
               (runtime.CPU_RANK_HOROVOD_SETTINGS)

Options after `--` go to the trainer (they replace the MNIST defaults:
--batch-size 64, --data-pipeline memory). Prints a line per variant with
its images/s, step time, allreduce wait and ratio to the first variant;
--json writes the settings and every run.
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

from benchmarks import CHECKOUT
from benchmarks.machine import machine_record
from horovod_train.core import options
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, RunFailed, run_main

PROG = "horovod_settings.py"
TRAINER = CHECKOUT / "horovod_train" / "pytorch_mnist.py"

# name: (extra horovodrun arguments, extra environment)
VARIANTS = {
    "spin": ([], {"OMPI_MCA_mpi_yield_when_idle": "0"}),
    "yield": ([], {}),
    "gloo": (["--gloo"], {}),
    "cycle-5ms": ([], {"HOROVOD_CYCLE_TIME": "5"}),
    "cycle-0.5ms": ([], {"HOROVOD_CYCLE_TIME": "0.5"}),
    "glibc-malloc": ([], {"HVT_MALLOC": "glibc"}),
    "fusion-128mb": (["--fusion-threshold-mb", "128"], {}),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", type=options.names_from(list(VARIANTS)),
                        default=",".join(VARIANTS),
                        help="variants to compare, the first is the reference (default: all)")
    parser.add_argument("--np", type=options.positive_int, default=2,
                        help="ranks on this machine (default 2)")
    parser.add_argument("--data-dir", type=Path, default=CHECKOUT / "data",
                        help="MNIST for the default workload (never downloaded)")
    parser.add_argument("--steps", type=options.positive_int, default=150,
                        help="timed steps per run (default 150)")
    parser.add_argument("--warmup-steps", type=options.non_negative_int, default=10)
    parser.add_argument("--repeats", type=options.positive_int, default=3,
                        help="runs per variant, in turns (default 3)")
    parser.add_argument("--timeout", type=options.positive_float, default=600,
                        help="seconds per run (default 600)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    parser.add_argument("trainer_args", nargs="*", metavar="-- TRAINER_ARGS")
    return parser.parse_args(argv)


def command(args: argparse.Namespace, variant: str, log_dir: Path) -> list[str]:
    horovodrun_args, _ = VARIANTS[variant]
    workload = args.trainer_args or ["--batch-size", "64", "--data-pipeline", "memory",
                                     "--data-dir", str(args.data_dir), "--no-download"]
    return [str(Path(sys.executable).parent / "horovodrun"), "-np", str(args.np),
            "-H", f"localhost:{args.np}", *horovodrun_args, sys.executable, str(TRAINER),
            "--benchmark-steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
            "--log-dir", str(log_dir), *workload]


def run_once(args: argparse.Namespace, variant: str) -> dict:
    _, environment = VARIANTS[variant]
    with tempfile.TemporaryDirectory(prefix="horovod-settings-") as tmp:
        cmd = command(args, variant, Path(tmp))
        try:
            result = subprocess.run(cmd, env={**os.environ, **environment}, capture_output=True,
                                    text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"{variant}: no result within {args.timeout:.0f} s") from None
        if result.returncode != 0:
            last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
            raise RunFailed(f"{variant}: exit {result.returncode}: {last}")
        record = json.loads((Path(tmp) / "benchmark.json").read_text())
    return {"variant": variant, "images_per_sec": record["images_per_sec"],
            "step_time_s": record["step_time_s"], "allreduce_time_s": record["allreduce_time_s"],
            "controller": record["controller"], "model": record["model"],
            "command": shown_command(cmd, Path(tmp)), "environment": environment}


def shown_command(cmd: list[str], log_dir: Path) -> str:
    """The trainer's command as a user would type it: python, the trainer's
    path in the checkout, LOG_DIR for the run's temporary directory."""
    words = cmd[cmd.index(sys.executable) + 1:]
    shown = {str(TRAINER): str(TRAINER.relative_to(CHECKOUT)), str(log_dir): "LOG_DIR"}
    return shlex.join(["python", *(shown.get(word, word) for word in words)])


def summarize(runs: list[dict], variants: list[str]) -> list[dict]:
    rows = []
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        rows.append({"variant": variant,
                     "images_per_sec": statistics.median(r["images_per_sec"] for r in mine),
                     "step_time_s": statistics.median(r["step_time_s"] for r in mine),
                     "allreduce_time_s": statistics.median(r["allreduce_time_s"] for r in mine),
                     "runs_images_per_sec": [r["images_per_sec"] for r in mine]})
    for row in rows:
        row["ratio_to_first"] = row["images_per_sec"] / rows[0]["images_per_sec"]
    return rows


def main() -> int:
    args = parse_args(sys.argv[1:])
    runs = []
    for repeat in range(args.repeats):
        for variant in args.variants:
            run = run_once(args, variant)
            runs.append({**run, "repeat": repeat})
            print(f"  {variant} #{repeat + 1}: {run['images_per_sec']:.0f} images/s", flush=True)
    rows = summarize(runs, args.variants)
    for row in rows:
        print(f"{row['variant']}: {row['images_per_sec']:.0f} images/s, step "
              f"{row['step_time_s'] * 1e3:.1f} ms, allreduce wait "
              f"{row['allreduce_time_s'] * 1e3:.2f} ms, {row['ratio_to_first']:.2f} of "
              f"{rows[0]['variant']}")
    if args.json:

        atomic_write_json(args.json, {
            "benchmark": "horovod_settings", "machine": machine_record(),
            "ranks": args.np, "steps": args.steps,
            "warmup_steps": args.warmup_steps, "repeats": args.repeats,
            "trainer_args": args.trainer_args, "rows": rows, "runs": runs})
    return 0


def cli() -> None:
    """The command's entry (benchmarks/horovod_settings.py)."""
    run_main(main, prog=PROG)


if __name__ == "__main__":
    cli()
