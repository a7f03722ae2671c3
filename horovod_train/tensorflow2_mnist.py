"""Train MNIST with TensorFlow 2 and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/tensorflow2_mnist.py --data-dir data

Same options and outputs as pytorch_mnist.py where they apply; rank 0 writes
metrics, TensorBoard logs, checkpoints and summary.json under --log-dir.
"""

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from the checkout (see pytorch_mnist.py).
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train import options  # noqa: E402
from horovod_train.errors import run_main  # noqa: E402


def parse_args(argv: list[str]) -> options.RunConfig:
    parser = options.base_parser("tensorflow2_mnist.py",
                                 "Train MNIST with TensorFlow 2 and Horovod.")
    return options.finish(parser.parse_args(argv))


def main() -> int:
    config = parse_args(sys.argv[1:])
    # TensorFlow's start-up INFO lines would drown each rank's output.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # Imported after parsing, so --help and option errors answer at once.
    from horovod_train import distributed, train_tensorflow

    with distributed.one_line_when_horovod_stops():
        train_tensorflow.run(config)
    return 0


def cli() -> None:
    """The console entry point (pyproject.toml)."""
    run_main(main)


if __name__ == "__main__":
    cli()
