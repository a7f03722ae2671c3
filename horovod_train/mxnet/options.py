"""The MXNet trainer's options: those every trainer has (core/options.py),
upstream's --dtype, and the clash only MXNet makes (no Adasum), which
config.validate asks for."""

import argparse
from dataclasses import dataclass

from horovod_train.core import options
from horovod_train.core.config import FrameworkOptions, Placement, RunConfig

PROG = "mxnet_mnist.py"


@dataclass(frozen=True)
class MXNetOptions(FrameworkOptions):
    def problem(self, config: RunConfig, placement: Placement | None) -> str | None:
        if config.horovod.use_adasum:
            return ("--use-adasum: Horovod's MXNet DistributedTrainer has no Adasum "
                    "(use the PyTorch or TensorFlow trainer)")
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = options.base_parser(PROG, "Train MNIST with MXNet and Horovod.")
    mxnet = parser.add_argument_group("mxnet")
    mxnet.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                       help="upstream's training data type: float32, what this trainer "
                            "trains in (float16 is refused: MXNet's CPU kernels, the only "
                            "ones this environment's MXNet has, are float32)")
    return parser


def parse_args(argv: list[str]) -> RunConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dtype != "float32":
        parser.error(f"--dtype {args.dtype}: this MXNet trains in float32 only (a CPU build, "
                     "whose kernels are float32); drop --dtype or give --dtype float32")
    del args.dtype
    return options.finish(parser, args, MXNetOptions("mxnet"))
