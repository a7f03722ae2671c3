"""The trainers' one main: parse the framework's options (its part's
options.py), then either start the ranks through horovod.run (--num-proc)
or run this rank's training. pytorch_mnist.py, tensorflow2_mnist.py and
mxnet_mnist.py are its commands, one per framework."""

import functools
import importlib
import os
import sys

from horovod_train.core.config import RunConfig
from horovod_train.core.errors import exit_code, run_main

# Each framework's options: build_parser(), parse_args(argv) and PROG, its command's name.
OPTIONS = {"pytorch": "horovod_train.torch.options",
           "tensorflow": "horovod_train.tensorflow.options",
           "mxnet": "horovod_train.mxnet.options"}


def options_of(framework: str):
    return importlib.import_module(OPTIONS[framework])


def parse_args(framework: str, argv: list[str]) -> RunConfig:
    return options_of(framework).parse_args(argv)


def main(framework: str, argv: list[str]) -> int:
    if framework == "tensorflow":
        from horovod_train.tensorflow.options import upstream_launch_words

        argv = upstream_launch_words(argv)
    config = parse_args(framework, argv)
    if config.launch.num_proc:
        from horovod_train.launch import python_launcher

        return python_launcher.start_ranks(options_of(framework).PROG,
                                           functools.partial(run_rank, framework), argv,
                                           config.launch)
    # Imported after parsing, so --help and option errors answer at once.
    from horovod_train.core import distributed, phases

    phases.mark("options")
    if framework == "pytorch":
        if config.framework.torch.elastic:
            from horovod_train.torch.elastic import run
        elif config.framework.benchmark.steps:
            from horovod_train.torch.benchmark_steps import run
        else:
            from horovod_train.torch.trainer import run
    elif framework == "tensorflow":
        # TensorFlow's start-up INFO lines would drown each rank's output.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        from horovod_train.tensorflow.trainer import run
    else:
        from horovod_train.core import runtime

        # MXNet sizes its OpenMP pool when it is imported: share the cores first.
        os.environ["OMP_NUM_THREADS"] = str(runtime.threads_before_init(config.device.threads))
        from horovod_train.mxnet.trainer import run
    phases.mark("imports")
    with distributed.one_line_when_horovod_stops():
        run(config)
    return 0


def run_rank(framework: str, argv: list[str]) -> int:
    """One rank that horovod.run started: main(framework, argv), its code as
    errors.run_main would exit with it, returned instead, since horovod.run
    collects each rank's return value."""
    try:
        return exit_code(lambda: main(framework, argv), options_of(framework).PROG)
    except SystemExit as exit_:  # argparse, or a rank told to end
        return exit_.code if isinstance(exit_.code, int) else 1


def cli(framework: str) -> None:
    """A trainer's command (pytorch_mnist.py's, say). It ends at once when
    done (errors.exit_now): every output is written by then."""
    run_main(lambda: main(framework, sys.argv[1:]), prog=options_of(framework).PROG,
             exit_at_once=True)
