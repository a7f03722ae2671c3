"""Command-line options shared by the trainers, read once into the run's
configuration (config.py): a typed, frozen RunConfig in sections that the
trainers take instead of argparse's Namespace."""

import argparse
import dataclasses
import json
from pathlib import Path

from horovod_train.core import config
from horovod_train.core.config import RunConfig
from horovod_train.core.console import say
from horovod_train.core.errors import ArgumentParser


def _number(kind, minimum, inclusive: bool):
    noun = {int: "an integer", float: "a number"}[kind]

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        # Written so that NaN, which compares false with everything, fails too.
        if not (value > minimum or (inclusive and value == minimum)):
            bound = f">= {minimum}" if inclusive else f"> {minimum}"
            raise argparse.ArgumentTypeError(f"{text} must be {bound}")
        return value

    return parse


positive_int = _number(int, 1, inclusive=True)
non_negative_int = _number(int, 0, inclusive=True)
positive_float = _number(float, 0.0, inclusive=False)
non_negative_float = _number(float, 0.0, inclusive=True)


def below_one(text: str) -> float:
    """A number in [0, 1), such as a share of probability."""
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{text} must be < 1")
    return value


def fraction(text: str) -> float:
    """A number in (0, 1], such as an accuracy."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} must be <= 1")
    return value


def names_from(choices):
    """An option's type: a comma-separated list of names, each one of `choices`."""

    def parse(text: str) -> list[str]:
        names = [name for name in text.split(",") if name]
        if not names or any(name not in choices for name in names):
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return names

    return parse


# The one definition of time in every trainer's output (metrics.py follows it).
TIMES_EPILOG = (
    "Times: wall time runs from the start of the trainer to its summary; training "
    "time (train_time_s, and time to --target-accuracy on the same clock) from the first "
    "step, after start-up, data loading and the broadcast of the initial state, to the end "
    "of the last epoch, evaluation and checkpoints included. Images/s count the time in "
    "training steps alone (step_time_s)."
)

# What runtime.init_horovod sets in each rank (docs/trainer.md says why).
RANK_SETTINGS_EPILOG = (
    " Each rank also sets, before Horovod starts, Open MPI to yield its core while it "
    "waits (OMPI_MCA_mpi_yield_when_idle=1) and, training on the CPU, Horovod's fusion "
    "buffer to 4 MB (HOROVOD_FUSION_THRESHOLD=4194304); settings of your own in the "
    "environment win."
)


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """Options every trainer has: data, schedule, Horovod, outputs."""
    parser = ArgumentParser(
        prog=prog, description=description, epilog=TIMES_EPILOG + RANK_SETTINGS_EPILOG,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", type=Path, default=Path("data"),
                      help="directory holding MNIST/raw/ (torchvision layout)")
    data.add_argument("--no-download", action="store_true",
                      help="fail instead of downloading missing MNIST files")

    schedule = parser.add_argument_group("training")
    schedule.add_argument("--epochs", type=positive_int, default=5)
    schedule.add_argument("--batch-size", type=positive_int, default=64,
                          help="images per rank per step, at most a rank's shard of the "
                               "training set")
    schedule.add_argument("--test-batch-size", type=positive_int, default=1000)
    schedule.add_argument("--lr", type=positive_float, default=0.05,
                          help="learning rate of one worker; scaled by the number of ranks")
    schedule.add_argument("--warmup-epochs", type=non_negative_float, default=1.0,
                          help="epochs of linear warm-up to the scaled learning rate")
    schedule.add_argument("--momentum", type=non_negative_float, default=0.9)
    schedule.add_argument("--seed", type=int, default=42)
    schedule.add_argument("--target-accuracy", type=fraction, default=None, metavar="A",
                          help="stop after the first epoch whose test accuracy reaches A "
                               "(0-1); the summary records the epoch and the training time "
                               "it took")

    horovod = parser.add_argument_group("horovod")
    horovod.add_argument("--fp16-allreduce", action="store_true",
                         help="compress gradients to float16 for the allreduce")
    horovod.add_argument("--use-adasum", action="store_true",
                         help="combine gradients with Adasum instead of averaging")
    horovod.add_argument("--stall-limit", type=non_negative_float, default=60.0,
                         metavar="SECONDS",
                         help="end the job when no training step finished for SECONDS on a "
                              "rank (another rank stopped, a host cut off: collectives over "
                              "MPI wait for ever), with one line naming the ranks that stopped "
                              "answering; 0: off. Not in --elastic runs, where Horovod Elastic "
                              "handles lost ranks")

    horovod.add_argument("--gradient-predivide-factor", type=positive_float, default=1.0,
                         metavar="F",
                         help="Horovod's: divide gradients by F before summing them and by "
                              "size/F after (the same average; F=size sums gradients of "
                              "1/size, safer from overflow in fp16)")

    launch = parser.add_argument_group(
        "launch", "start the ranks from this command, through Horovod's Python launcher "
        "(horovod.run), as upstream's examples do, instead of under horovodrun")
    launch.add_argument("--num-proc", type=positive_int, default=None, metavar="N",
                        help="start N ranks")
    launch.add_argument("--hosts", default=None, metavar="HOST:SLOTS[,HOST:SLOTS...]",
                        help="where (default: this machine); as horovodrun -H")
    launch.add_argument("--communication", choices=("gloo", "mpi"), default=None,
                        help="the controller (default: MPI where Open MPI is installed, "
                             "else Gloo)")

    device = parser.add_argument_group("device")
    device.add_argument("--no-cuda", action="store_true", help="train on the CPU")
    device.add_argument("--threads", type=positive_int, default=None,
                        help="CPU threads per rank (default: the host's cores / ranks on it)")

    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--log-dir", type=Path, default=Path("runs") / prog.removesuffix(".py"),
                         help="metrics.jsonl, TensorBoard events and summary.json go here")
    outputs.add_argument("--checkpoint-dir", type=Path, default=None,
                         help="where rank 0 writes a checkpoint after each epoch "
                              "(default: LOG_DIR/checkpoints)")
    outputs.add_argument("--resume", action="store_true",
                         help="continue from the checkpoint in CHECKPOINT_DIR (with none "
                              "there, say so and start at epoch 1)")
    outputs.add_argument("--no-progress", action="store_true",
                         help="no progress: neither the bar nor its lines")
    outputs.add_argument("--progress-every", type=positive_float, default=10.0,
                         metavar="SECONDS",
                         help="where stderr is not a terminal (a log, horovodrun), progress is "
                              "a line from rank 0 at most every SECONDS instead of a bar")
    outputs.add_argument("--log-interval", type=positive_int, default=None, metavar="N",
                         help="also a line every N batches, in metrics.jsonl and on the "
                              "console: the loss of rank 0's last batch (upstream's examples "
                              "print one every 10 batches unasked; here only when asked)")
    parser.add_argument("--check-options", action="store_true",
                        help="check the options, print the run's configuration as JSON and "
                             "exit, starting nothing (a Slurm job checks its trainer's options "
                             "so, once, before the ranks start)")
    return parser


def finish(parser: argparse.ArgumentParser, args: argparse.Namespace,
           framework: config.FrameworkOptions) -> RunConfig:
    """The run configuration of parsed options and the framework's own
    (which the framework's part builds, taking its options out of `args`),
    with the defaults that depend on other options, checked as a whole
    (config.validate): a clash is a usage error, one line and exit 2. With
    --check-options it is printed instead, and the process ends."""
    values = vars(args)
    check_only = values.pop("check_options")
    if values["checkpoint_dir"] is None:
        values["checkpoint_dir"] = args.log_dir / "checkpoints"
    sections = {name: take(args, section)
                for name, section in (("data", config.Data), ("schedule", config.Schedule),
                                      ("horovod", config.Horovod), ("device", config.Device),
                                      ("outputs", config.Outputs), ("launch", config.Launch))}
    if values:
        raise TypeError(f"options without a section: {', '.join(sorted(values))}")
    run_config = RunConfig(**sections, framework=framework)
    problem = config.validate(run_config)
    if problem:
        parser.error(problem)
    if check_only:
        say(json.dumps(run_config.as_record(), sort_keys=True))
        raise SystemExit(0)
    return run_config


def take(values: argparse.Namespace, section):
    """The dataclass `section` of the parsed options that are its fields,
    taken out of `values` (for finish(), which wants the rest)."""
    fields = vars(values)
    return section(**{field.name: fields.pop(field.name) for field in dataclasses.fields(section)})
