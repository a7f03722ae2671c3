"""Training throughput of our PyTorch trainer against a reference that
behaves like Horovod's own examples/pytorch/pytorch_mnist.py, side by side in
one process: the same device, network, batch size and data.

    ours       the trainer's default pipeline (MNIST held on the device as
               uint8, batches gathered and normalised there) and its step
    reference  a torchvision-style MNIST dataset decoding and normalising
               every image in Python (PIL, ToTensor, Normalize), a
               DataLoader, a plain step with hvd.DistributedOptimizer

The two are timed in turns (ours, reference, ours, reference, ...) so that
other load on the machine slows both alike; each figure is the median of its
side's turns. Prints both figures, their ratio (the goal is 1.5 or more) and
the process's peak RSS; --json writes the same as JSON (atomically).

    python benchmarks/trainer_throughput.py --json throughput.json
    python benchmarks/trainer_throughput.py --data-dir data --steps 300 --repeats 5

Without --data-dir it trains on generated MNIST-shaped uint8 images, which
is enough for throughput. Run it as one process (no horovodrun).
"""

import argparse
import sys
from pathlib import Path

from benchmarks.machine import machine_record
from horovod_train.core import options, outputs
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, UserError, run_main
from horovod_train.torch.model_names import MNIST_MODELS

PROG = "trainer_throughput.py"
GENERATED_SAMPLES = 60_000  # the size of MNIST's training set


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="train on the real digits in DATA_DIR/MNIST/raw/ (torchvision "
                             "layout; never downloaded) instead of generated images")
    parser.add_argument("--samples", type=options.positive_int, default=None,
                        help=f"images to train on: the first N of --data-dir's training split "
                             f"(default: all), or N generated (default {GENERATED_SAMPLES})")
    parser.add_argument("--model", choices=MNIST_MODELS, default="horovod_example",
                        help="network of both sides (default: horovod_example, the network "
                             "of Horovod's example)")
    parser.add_argument("--batch-size", type=options.positive_int, default=64,
                        help="images per step on both sides (default 64, the example's)")
    parser.add_argument("--steps", type=options.positive_int, default=200,
                        help="timed steps per turn (default 200)")
    parser.add_argument("--repeats", type=options.positive_int, default=3,
                        help="turns per side, alternated (default 3)")
    parser.add_argument("--warmup-steps", type=options.non_negative_int, default=20,
                        help="untimed steps per side before the first turn (default 20)")
    parser.add_argument("--lr", type=options.positive_float, default=0.01,
                        help="learning rate of both sides (default 0.01, the example's)")
    parser.add_argument("--momentum", type=options.non_negative_float, default=0.5,
                        help="SGD momentum of both sides (default 0.5, the example's)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-cuda", action="store_true", help="measure on the CPU")
    parser.add_argument("--threads", type=options.positive_int, default=None,
                        help="CPU threads of both sides (default: all the cores)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the settings and figures here as JSON")
    args = parser.parse_args(argv)
    if args.samples is not None and args.samples < args.batch_size:
        parser.error(f"--samples {args.samples} is fewer than one batch of {args.batch_size}")
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    # The input and the output checked first, so that neither waits for
    # torch's import or the measurement (numpy alone reads the digits).
    if args.json:
        outputs.check_can_create(args.json.parent)
    from horovod_train.core import mnist

    if args.data_dir is not None:
        split = mnist.load_split(args.data_dir, "train", download=False)
        if args.samples is not None and args.samples > len(split):
            raise UserError(f"--samples {args.samples}: {args.data_dir} holds "
                            f"{len(split)} training images")
        if len(split) < args.batch_size:
            raise UserError(f"{args.data_dir} holds {len(split)} training images, fewer "
                            f"than one batch of {args.batch_size}")
        split = mnist.Split(split.images[:args.samples], split.labels[:args.samples])
    from benchmarks import throughput
    from horovod_train.torch.trainer import init

    if args.data_dir is None:
        split = throughput.generated_split(args.samples or GENERATED_SAMPLES, args.seed)
    rt, device = init(use_cuda=not args.no_cuda, threads=args.threads, seed=args.seed)
    sides = throughput.build_sides(args.model, split, args.batch_size, args.lr, args.momentum,
                                   args.seed, rt.rank, rt.size, device)
    rates = throughput.alternate(sides, args.warmup_steps, args.steps, args.repeats,
                                 args.batch_size, device)
    record = throughput.build_record(rates, {
        "benchmark": "trainer_throughput", "model": args.model, "batch_size": args.batch_size,
        "steps": args.steps, "repeats": args.repeats, "warmup_steps": args.warmup_steps,
        "order": list(sides), "ranks": rt.size,
        "data": "mnist" if args.data_dir else "generated",
        "data_dir": str(args.data_dir) if args.data_dir else None, "samples": len(split),
    }, sides, device)
    if rt.is_root:
        print(throughput.format_record(record), flush=True)
        if args.json:
            atomic_write_json(args.json, {**record, "machine": machine_record()})
    return 0



def cli() -> None:
    """The command's entry (benchmarks/trainer_throughput.py)."""
    run_main(main)


if __name__ == "__main__":
    cli()
