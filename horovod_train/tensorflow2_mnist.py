"""Train MNIST with TensorFlow 2 and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/tensorflow2_mnist.py --data-dir data

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
    return options.base_parser("tensorflow2_mnist.py", "Train MNIST with TensorFlow 2 and Horovod.")


def parse_args(argv: list[str]) -> RunConfig:
    parser = build_parser()
    return options.finish(parser, parser.parse_args(argv), "tensorflow")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = parse_args(argv)
    if config.launch.num_proc:
        from horovod_train.launch import python_launcher

        return python_launcher.start_ranks("horovod_train.tensorflow2_mnist",
                                           "tensorflow2_mnist.py", argv, config.launch)
    # TensorFlow's start-up INFO lines would drown each rank's output.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # Imported after parsing, so --help and option errors answer at once.
    from horovod_train.core import distributed, phases

    phases.mark("options")
    from horovod_train.tensorflow import trainer
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
