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
    parser = options.base_parser("mxnet_mnist.py", "Train MNIST with MXNet and Horovod.")
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
    return options.finish(parser, args, "mxnet")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = parse_args(argv)
    if config.launch.num_proc:
        from horovod_train.launch import python_launcher

        return python_launcher.start_ranks("horovod_train.mxnet_mnist", "mxnet_mnist.py", argv,
                                           config.launch)
    from horovod_train.core import distributed, phases, runtime

    phases.mark("options")
    # MXNet sizes its OpenMP pool when it is imported: share the cores first.
    os.environ["OMP_NUM_THREADS"] = str(runtime.threads_before_init(config.device.threads))
    from horovod_train.mxnet import trainer
    phases.mark("imports")

    with distributed.one_line_when_horovod_stops():
        trainer.run(config)
    return 0


def cli() -> None:
    """The command's entry: run as a file, the command users type. It ends
    at once when done (errors.exit_now): every output is written by then."""
    run_main(main, exit_at_once=True)


if __name__ == "__main__":
    cli()
