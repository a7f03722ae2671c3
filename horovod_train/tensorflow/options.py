"""The TensorFlow trainer's options: those every trainer has
(core/options.py), none of its own; and the command line of Horovod's own
example, whose three words start its ranks."""

import argparse

from horovod_train.core import options
from horovod_train.core.config import FrameworkOptions, RunConfig

PROG = "tensorflow2_mnist.py"


def upstream_launch_words(argv: list[str]) -> list[str]:
    """The trainer's argv (train.main's) with Horovod's example's
    `NUM_PROC HOSTS COMMUNICATION` (examples/tensorflow2/tensorflow2_mnist.py
    2 localhost:2 gloo: horovod.run's np, hosts and controller), given first,
    as our --num-proc, --hosts and --communication; any other argv as it is."""
    if len(argv) >= 3 and not any(word.startswith("-") for word in argv[:3]):
        return ["--num-proc", argv[0], "--hosts", argv[1], "--communication", argv[2],
                *argv[3:]]
    return argv


def build_parser() -> argparse.ArgumentParser:
    parser = options.base_parser(
        PROG, "Train MNIST with TensorFlow 2 and Horovod. As Horovod's own example, it also "
        "takes NUM_PROC HOSTS COMMUNICATION, given first, for --num-proc, --hosts and "
        "--communication.")
    parser.usage = f"{PROG} [NUM_PROC HOSTS COMMUNICATION] [OPTIONS]"
    return parser


def parse_args(argv: list[str]) -> RunConfig:
    parser = build_parser()
    return options.finish(parser, parser.parse_args(argv), FrameworkOptions("tensorflow"))
