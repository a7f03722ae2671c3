"""Step time of each network with its weights channels_last (NHWC, the
trainers' default) against contiguous (NCHW), side by side in one process:
forward, backward and an SGD step on one random batch, the two layouts timed
in turns (channels_last, contiguous, channels_last, ...) so that other load
on the machine slows both alike; each figure is the median of its turns.

    python benchmarks/memory_format_speed.py --json memory-format.json
    python benchmarks/memory_format_speed.py --models resnet18 --image-size 32 --batch-size 32

Prints one line per network with both step times and their ratio
(channels_last / contiguous: below 1 is faster). Run it as one process, with
the threads one rank gets (--threads, default 1: two ranks on two cores).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.machine import machine_record
from horovod_train.core import options
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, run_main
from horovod_train.torch.models import MEMORY_FORMATS, MODELS, build_model, input_shape

PROG = "memory_format_speed.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=options.names_from(sorted(MODELS)),
                        default="mnist_cnn,horovod_example,resnet18",
                        help="networks, comma-separated (default mnist_cnn,horovod_example,"
                             "resnet18)")
    parser.add_argument("--batch-size", type=options.positive_int, default=64)
    parser.add_argument("--image-size", type=options.positive_int, default=32,
                        help="height and width of the resnet models' images (default 32)")
    parser.add_argument("--steps", type=options.positive_int, default=30,
                        help="timed steps per turn (default 30)")
    parser.add_argument("--repeats", type=options.positive_int, default=3,
                        help="turns per layout, alternated (default 3)")
    parser.add_argument("--threads", type=options.positive_int, default=1)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    return parser.parse_args(argv)


def step_timer(model_name: str, memory_format: str, batch_size: int, image_size: int):
    """A function timing `steps` training steps of a fresh model (seconds per step)."""
    torch.manual_seed(0)
    model = build_model(model_name, memory_format)
    shape, classes = input_shape(model_name, image_size)
    images = torch.randn(batch_size, *shape)
    labels = torch.randint(0, classes, (batch_size,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def timed(steps: int) -> float:
        tic = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            F.cross_entropy(model(images), labels).backward()
            optimizer.step()
        return (time.perf_counter() - tic) / steps

    timed(3)  # warm-up: oneDNN picks and caches its kernels
    return timed


def measure(args: argparse.Namespace) -> list[dict]:
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.models:
        timers = {fmt: step_timer(name, fmt, args.batch_size, args.image_size)
                  for fmt in MEMORY_FORMATS}
        turns = {fmt: [] for fmt in MEMORY_FORMATS}
        for _ in range(args.repeats):
            for fmt, timer in timers.items():
                turns[fmt].append(timer(args.steps))
        medians = {fmt: statistics.median(times) for fmt, times in turns.items()}
        row = {"model": name, "step_ms": {fmt: m * 1e3 for fmt, m in medians.items()},
               "turns_ms": {fmt: [t * 1e3 for t in times] for fmt, times in turns.items()},
               "channels_last_over_contiguous": medians["channels_last"] / medians["contiguous"]}
        rows.append(row)
        print(f"{name}: channels_last {row['step_ms']['channels_last']:.1f} ms, contiguous "
              f"{row['step_ms']['contiguous']:.1f} ms a step, ratio "
              f"{row['channels_last_over_contiguous']:.2f}", flush=True)
    return rows


def main() -> int:
    args = parse_args(sys.argv[1:])
    rows = measure(args)
    if args.json:

        atomic_write_json(args.json, {
            "machine": machine_record(),
            "settings": {"batch_size": args.batch_size, "image_size": args.image_size,
                         "steps": args.steps, "repeats": args.repeats, "threads": args.threads},
            "torch": torch.__version__, "results": rows})
    return 0



def cli() -> None:
    """The command's entry (benchmarks/memory_format_speed.py)."""
    run_main(main, prog=PROG)


if __name__ == "__main__":
    cli()
