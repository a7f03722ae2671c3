"""Train MNIST with PyTorch and Horovod.

    horovodrun -np 4 -H a:2,b:2 python horovod_train/pytorch_mnist.py --data-dir data

Every rank runs this file; rank 0 prints, writes metrics, TensorBoard logs,
checkpoints and summary.json under --log-dir. With --benchmark-steps it
times that many steps instead (benchmarks/run_matrix.sh runs it so).
"""

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file: import the package from the checkout, not from this
    # directory (whose module names would shadow installed packages).
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from horovod_train.core import options  # noqa: E402
from horovod_train.core.config import RunConfig  # noqa: E402
from horovod_train.core.errors import run_main  # noqa: E402
from horovod_train.torch.models import MEMORY_FORMATS, MNIST_MODELS, MODELS  # noqa: E402
from horovod_train.torch.presets import PRESETS, describe_preset  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = options.base_parser("pytorch_mnist.py", "Train MNIST with PyTorch and Horovod.")
    parser.epilog += (
        " PyTorch's ranks also keep the memory a step frees for the next step, in glibc's "
        "malloc (HVT_MALLOC=glibc keeps glibc's own behaviour).")
    torch_options = parser.add_argument_group("pytorch")
    torch_options.add_argument("--model", choices=sorted(MODELS), default="mnist_cnn")
    torch_options.add_argument("--memory-format", choices=sorted(MEMORY_FORMATS),
                               default="channels_last", help=options.MEMORY_FORMAT_HELP)
    torch_options.add_argument("--amp", choices=options.AMP_CHOICES, default="auto",
                               help=options.AMP_HELP)
    torch_options.add_argument("--use-mixed-precision", action="store_true",
                               help="upstream's name for --amp fp16 (autocast to float16 "
                                    "with loss scaling; needs a GPU)")
    torch_options.add_argument("--label-smoothing", type=options.below_one, default=0.0,
                               metavar="EPS",
                               help="train against targets that give EPS of the probability "
                                    "to the other classes (Szegedy et al., 2016): a network "
                                    "trained for few steps generalises better (fast-mnist "
                                    "uses it)")
    torch_options.add_argument("--backward-passes-per-step", type=options.positive_int,
                               default=1, help="accumulate this many batches locally per allreduce")
    torch_options.add_argument("--sync-bn", action="store_true",
                               help="batch-norm statistics over all ranks (hvd.SyncBatchNorm)")
    torch_options.add_argument("--data-pipeline", choices=("memory", "loader"), default=None,
                               help="memory (the default): each split held on the training "
                                    "device as uint8, batches gathered and normalised there; "
                                    "loader: a DataLoader, for data that does not fit in "
                                    "memory, and the default of --benchmark-steps runs, whose "
                                    "figures compare with ddp_benchmark.py's DataLoader")
    torch_options.add_argument("--num-workers", type=options.non_negative_int, default=None,
                               help="DataLoader worker processes with --data-pipeline loader "
                                    "(default: 2 on GPU, 0 on CPU)")
    torch_options.add_argument(
        "--preset", choices=sorted(PRESETS), default=None,
        help="defaults for several options at once, overridden by options given: "
             + "; ".join(f"{name}: {describe_preset(name)}" for name in sorted(PRESETS)))
    elastic = parser.add_argument_group(
        "elastic", "launch with horovodrun --min-np N --max-np M --host-discovery-script "
        "scripts/discover_hosts.sh (see docs/elastic-and-failures.md)")
    elastic.add_argument("--elastic", action="store_true",
                         help="Horovod Elastic: go on when hosts are lost or added")
    elastic.add_argument("--commit-every", type=options.positive_int, default=10, metavar="N",
                         help="commit the training state every N steps: the most a lost host "
                              "costs (default 10)")
    options.add_benchmark_options(parser)
    return parser


def parse_args(argv: list[str]) -> RunConfig:
    parser = build_parser()
    preset = parser.parse_known_args(argv)[0].preset
    if preset:
        parser.set_defaults(**PRESETS[preset])
    args = parser.parse_args(argv)
    if args.use_mixed_precision:
        if args.amp not in ("auto", "fp16"):
            parser.error(f"--use-mixed-precision is --amp fp16: it does not combine with "
                         f"--amp {args.amp}")
        args.amp = "fp16"
    del args.use_mixed_precision
    if args.data_pipeline is None:  # elastic runs refuse the loader
        args.data_pipeline = "loader" if args.benchmark_steps and not args.elastic else "memory"
    return options.finish(parser, args, "pytorch", MNIST_MODELS)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = parse_args(argv)
    if config.launch.num_proc:
        from horovod_train.launch import python_launcher

        return python_launcher.start_ranks("horovod_train.pytorch_mnist", "pytorch_mnist.py", argv,
                                           config.launch)
    # Imported after parsing, so --help and option errors answer at once.
    from horovod_train.core import distributed, phases

    phases.mark("options")
    if config.torch.elastic:
        from horovod_train.torch.elastic import run
    elif config.benchmark.steps:
        from horovod_train.torch.benchmark_steps import run
    else:
        from horovod_train.torch.trainer import run
    phases.mark("imports")
    with distributed.one_line_when_horovod_stops():
        run(config)
    return 0


def cli() -> None:
    """The command's entry: run as a file, the command users type. It ends
    at once when done (errors.exit_now): every output is written by then."""
    run_main(main, exit_at_once=True)


if __name__ == "__main__":
    cli()
