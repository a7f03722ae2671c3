"""Train MNIST with MXNet (Gluon) and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/mxnet_mnist.py --data-dir data

Same options and outputs as pytorch_mnist.py where they apply; rank 0 writes
metrics, TensorBoard logs, checkpoints and summary.json under --log-dir.
"""

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from the checkout (see pytorch_mnist.py).
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.core import options  # noqa: E402
from horovod_train.core.config import RunConfig  # noqa: E402
from horovod_train.core.errors import run_main  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    return options.base_parser("mxnet_mnist.py", "Train MNIST with MXNet and Horovod.")


def parse_args(argv: list[str]) -> RunConfig:
    parser = build_parser()
    return options.finish(parser, parser.parse_args(argv), "mxnet")


def main() -> int:
    config = parse_args(sys.argv[1:])
    from horovod_train.core import distributed, runtime

    # MXNet sizes its OpenMP pool when it is imported: share the cores first.
    os.environ["OMP_NUM_THREADS"] = str(runtime.threads_before_init(config.device.threads))
    from horovod_train.mxnet import trainer

    with distributed.one_line_when_horovod_stops():
        trainer.run(config)
    return 0


def cli() -> None:
    """The command's entry: run as a file, the command users type."""
    run_main(main)


if __name__ == "__main__":
    cli()
