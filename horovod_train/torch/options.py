"""The PyTorch trainer's options: its argparse groups beside the ones every
trainer has (core/options.py), its sections of the run configuration (Torch,
Benchmark) and the clashes only they make, which config.validate asks for.
Standard library only at import, so the lab's commands that share these
options answer --help on a bare python3 (benchmarks/matrix.py)."""

import argparse
import dataclasses
from dataclasses import dataclass

from horovod_train.core import options
from horovod_train.core.config import FrameworkOptions, Placement, RunConfig
from horovod_train.torch.model_names import MEMORY_FORMAT_NAMES, MNIST_MODELS, MODEL_NAMES
from horovod_train.torch.presets import PRESETS, describe_preset

PROG = "pytorch_mnist.py"

# The trainer's and the DDP baseline's --amp: one precision for epochs,
# elastic runs and timed steps, so the matrix times the step users train.
AMP_CHOICES = ("auto", "bf16", "fp16", "off")
AMP_HELP = ("mixed precision of the forward and backward passes: auto (the default) is bf16 "
            "on GPUs that have it, fp16 with loss scaling on other GPUs, off on the CPU; "
            "bf16 also runs on the CPU; fp16 needs a GPU")

# The trainer's and the DDP baseline's --memory-format (model_names.MEMORY_FORMAT_NAMES).
MEMORY_FORMAT_HELP = ("layout of the convolution weights and activations: channels_last "
                      "(NHWC) is faster on CPUs (oneDNN) and what GPUs' tensor cores want; "
                      "contiguous (NCHW) is PyTorch's own default")


@dataclass(frozen=True)
class Torch:
    model: str
    memory_format: str
    """channels_last or contiguous, for weights and activations."""
    amp: str
    """Mixed precision: auto, bf16, fp16 or off (the same in every kind of run)."""
    label_smoothing: float
    backward_passes_per_step: int
    """Batches whose gradients one allreduce and optimizer step average."""
    sync_bn: bool
    """Batch-norm statistics over all ranks (GPUs only)."""
    data_pipeline: str
    """memory (the splits on the device) or loader (a DataLoader)."""
    num_workers: int | None
    """DataLoader workers; None: 2 on GPUs, 0 on the CPU."""
    preset: str | None
    """The preset whose defaults the run took (presets.py)."""
    elastic: bool
    """Horovod Elastic: go on when hosts are lost or added."""
    commit_every: int
    """Steps between commits of the elastic state: the most a lost host costs."""


@dataclass(frozen=True)
class Benchmark:
    steps: int | None
    """Timed training steps instead of epochs (--benchmark-steps); None: train for epochs."""
    warmup_steps: int
    """Untimed steps before them."""
    synthetic: bool
    """Random images made once on the device instead of MNIST."""
    image_size: int
    """Height and width of the synthetic images of the resnet models."""


# Options that shape something a kind of run does not have, so that it
# would ignore them without a word: (the option as the user typed it, whether
# the config has it). An elastic run's ranks change under it (no batch-norm
# sync, accumulation or DataLoader sized for them) and Horovod's elastic
# optimizer averages; a benchmark run times plain steps, with no checkpoint,
# no evaluation and no schedule.
GIVEN = {
    "--resume": lambda c: c.outputs.resume,
    "--use-adasum": lambda c: c.horovod.use_adasum,
    "--sync-bn": lambda c: c.framework.torch.sync_bn,
    "--backward-passes-per-step": lambda c: c.framework.torch.backward_passes_per_step != 1,
    "--data-pipeline loader": lambda c: c.framework.torch.data_pipeline == "loader",
    "--target-accuracy": lambda c: c.schedule.target_accuracy is not None,
    "--label-smoothing": lambda c: c.framework.torch.label_smoothing != 0,
    "--benchmark-steps": lambda c: c.framework.benchmark.steps is not None,
    "--num-proc": lambda c: c.launch.num_proc is not None,
}
REFUSED_BY = {
    # An elastic job is horovodrun's (--host-discovery-script), not horovod.run's.
    "--elastic": ("--benchmark-steps", "--use-adasum", "--sync-bn",
                  "--backward-passes-per-step", "--data-pipeline loader", "--target-accuracy",
                  "--num-proc"),
    "--benchmark-steps": ("--resume", "--use-adasum", "--sync-bn", "--backward-passes-per-step",
                          "--target-accuracy", "--label-smoothing"),
}


@dataclass(frozen=True)
class PyTorchOptions(FrameworkOptions):
    torch: Torch
    benchmark: Benchmark

    def problem(self, config: RunConfig, placement: Placement | None) -> str | None:
        """The clashes of the PyTorch trainer's own options (config.validate's)."""
        torch, bench = self.torch, self.benchmark
        for mode, on in (("--elastic", torch.elastic),
                         ("--benchmark-steps", bench.steps is not None)):
            given = [option for option in REFUSED_BY[mode] if on and GIVEN[option](config)]
            if given:
                return f"{mode} does not combine with {', '.join(given)}"
        problem = input_problem(torch.model, bench.synthetic, bench.steps is not None,
                                MNIST_MODELS)
        if problem or placement is None:
            return problem
        if torch.sync_bn and not placement.on_gpu:
            return "--sync-bn needs GPUs: Horovod's SyncBatchNorm works on CUDA tensors only"
        return amp_problem(torch.amp, placement.on_gpu)

    def as_record(self) -> dict:
        record = {**dataclasses.asdict(self.torch), **dataclasses.asdict(self.benchmark)}
        record["benchmark_steps"] = record.pop("steps")
        return record


def amp_problem(amp: str, on_gpu: bool) -> str | None:
    """--amp against the device; the DDP baseline shares it."""
    if amp == "fp16" and not on_gpu:
        return "--amp fp16 needs a GPU (its loss scaling is CUDA's): use bf16 or off on the CPU"
    return None


def input_problem(model: str, synthetic: bool, benchmarking: bool,
                  mnist_models: tuple[str, ...]) -> str | None:
    """What is wrong with a network's input, or None: synthetic images and
    the networks that take no MNIST (the resnets) are for timed steps only,
    and those networks take synthetic images only. The trainer's
    --benchmark-steps and the DDP baseline (benchmarks/ddp_benchmark.py) share it."""
    if not benchmarking and (synthetic or model not in mnist_models):
        return "--synthetic and the resnet models are for --benchmark-steps runs only"
    if model not in mnist_models and not synthetic:
        return f"--model {model} takes synthetic images only: add --synthetic"
    return None


def add_benchmark_options(parser: argparse.ArgumentParser) -> None:
    """Throughput mode: timed steps instead of epochs (see timed_steps.py)."""
    bench = parser.add_argument_group("benchmark")
    bench.add_argument("--benchmark-steps", type=options.positive_int, default=None,
                       metavar="N",
                       help="time N training steps instead of training for epochs; no "
                            "evaluation or checkpoints; writes LOG_DIR/benchmark.json")
    bench.add_argument("--warmup-steps", type=options.non_negative_int, default=5,
                       help="untimed steps before the timed ones")
    bench.add_argument("--synthetic", action="store_true",
                       help="random images made once on the device instead of MNIST "
                            "(the only input of the resnet models)")
    bench.add_argument("--image-size", type=options.positive_int, default=224,
                       help="height and width of the synthetic images of the resnet models")


def build_parser() -> argparse.ArgumentParser:
    parser = options.base_parser(PROG, "Train MNIST with PyTorch and Horovod.")
    parser.epilog += (
        " PyTorch's ranks also keep the memory a step frees for the next step, in glibc's "
        "malloc (HVT_MALLOC=glibc keeps glibc's own behaviour).")
    torch_options = parser.add_argument_group("pytorch")
    torch_options.add_argument("--model", choices=sorted(MODEL_NAMES), default="mnist_cnn")
    torch_options.add_argument("--memory-format", choices=sorted(MEMORY_FORMAT_NAMES),
                               default="channels_last", help=MEMORY_FORMAT_HELP)
    torch_options.add_argument("--amp", choices=AMP_CHOICES, default="auto", help=AMP_HELP)
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
    add_benchmark_options(parser)
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
    args.steps = args.benchmark_steps
    del args.benchmark_steps
    own = PyTorchOptions("pytorch", torch=options.take(args, Torch),
                         benchmark=options.take(args, Benchmark))
    return options.finish(parser, args, own)
