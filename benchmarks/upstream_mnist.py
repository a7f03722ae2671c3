"""The loop that behaves like Horovod's own examples/pytorch/pytorch_mnist.py
(benchmarks/upstream_example.py), trained for whole epochs and tested after
each, as the example does: the reference that benchmarks/gpu_check.py puts
our trainer beside, on the same digits and ranks. The example's defaults:
batch 64, SGD with lr 0.01 (times the ranks) and momentum 0.5, seed 42, one
CPU thread per rank, its network. Run it under horovodrun:

    horovodrun -np 2 -H localhost:2 python benchmarks/upstream_mnist.py \\
        --data-dir data --epochs 3 --json upstream.json

Rank 0 prints each epoch's test accuracy and writes --json: the accuracies,
the training time (first step to the last test's end), the settings and
the machine.
The data are read, never downloaded (`python -m horovod_train mnist
download --data-dir DIR` fetches them).
"""

import argparse
import sys
import time
from pathlib import Path

from horovod_train.core import options
from horovod_train.core.atomic import atomic_write_json
from horovod_train.core.errors import ArgumentParser, run_main

PROG = "upstream_mnist.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True,
                        help="directory holding MNIST/raw/ (torchvision layout)")
    parser.add_argument("--epochs", type=options.positive_int, default=10,
                        help="epochs to train (default 10, the example's)")
    parser.add_argument("--batch-size", type=options.positive_int, default=64)
    parser.add_argument("--lr", type=options.positive_float, default=0.01,
                        help="learning rate of one rank, scaled by the ranks (default 0.01)")
    parser.add_argument("--momentum", type=options.non_negative_float, default=0.5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-cuda", action="store_true", help="train on the CPU")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the settings and figures here as JSON (rank 0)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    # Imported after parsing, so --help and option errors answer at once.
    from benchmarks import upstream_example
    from benchmarks.machine import machine_record
    from horovod_train.core import mnist
    from horovod_train.torch.models import build_model
    from horovod_train.torch.trainer import distributed_optimizer, init

    train, test = mnist.load_train_test(args.data_dir, download=False)
    # The example: one CPU thread per rank, the same seed everywhere.
    rt, device = init(use_cuda=not args.no_cuda, threads=1, seed=args.seed)
    model = build_model("horovod_example").to(device)
    optimizer = distributed_optimizer(model, args.lr * rt.size, args.momentum,
                                      fp16_allreduce=False)
    import horovod.torch as hvd

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    trainer = upstream_example.ReferenceTrainer(model, optimizer, train, args.batch_size,
                                                rt.rank, rt.size, device)
    started = time.perf_counter()
    epochs = []
    for epoch in range(1, args.epochs + 1):
        trainer.run(trainer.steps_per_epoch)
        figures = upstream_example.evaluate(model, test, rt.rank, rt.size, device)
        epochs.append({"epoch": epoch, **figures})
        if rt.is_root:
            print(f"{PROG}: epoch {epoch}: test accuracy {figures['test_accuracy']:.4f}, "
                  f"test loss {figures['test_loss']:.4f}", flush=True)
    train_time_s = time.perf_counter() - started
    if rt.is_root and args.json:
        atomic_write_json(args.json, {
            "benchmark": "upstream_mnist", "ranks": rt.size, "device": str(device),
            "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
            "momentum": args.momentum, "seed": args.seed,
            "train_samples": len(train), "test_samples": len(test),
            "train_time_s": train_time_s, "test_accuracy": epochs[-1]["test_accuracy"],
            "per_epoch": epochs, "machine": machine_record()})
    return 0


def cli() -> None:
    """The command's entry (benchmarks/upstream_mnist.py)."""
    run_main(main)


if __name__ == "__main__":
    cli()
