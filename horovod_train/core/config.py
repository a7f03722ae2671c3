"""The run's configuration: every trainer option, read once (options.py
parses the command line) into frozen sections, each field with a line of
doc; the PyTorch trainer's own options in sections of their own, absent
from the other frameworks' runs. validate() is the one place where options
are checked against each other."""

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Data:
    data_dir: Path
    """Holds MNIST/raw/ (torchvision's layout)."""
    no_download: bool
    """Fail with the list of missing files instead of downloading them."""


@dataclass(frozen=True)
class Schedule:
    epochs: int
    batch_size: int
    """Images per rank per step."""
    test_batch_size: int
    lr: float
    """The learning rate of one worker, scaled by the number of ranks."""
    warmup_epochs: float
    """Epochs of linear warm-up to the scaled learning rate."""
    momentum: float
    seed: int
    target_accuracy: float | None
    """Stop after the first epoch whose test accuracy reaches it."""


@dataclass(frozen=True)
class Horovod:
    fp16_allreduce: bool
    """Compress gradients to float16 for the allreduce."""
    use_adasum: bool
    """Combine gradients with Adasum instead of averaging."""
    stall_limit: float
    """Seconds without a finished step on some rank before the job ends; 0: off."""
    gradient_predivide_factor: float
    """Horovod's: gradients divided by it before the sum and by size/it after."""


@dataclass(frozen=True)
class Launch:
    num_proc: int | None
    """Ranks this command starts itself, through horovod.run; None: started by horovodrun."""
    hosts: str | None
    """host:slots[,host:slots...] for those ranks; None: this machine."""
    communication: str | None
    """gloo or mpi for those ranks; None: horovod.run's choice."""


@dataclass(frozen=True)
class Device:
    no_cuda: bool
    """Train on the CPU even where there are GPUs."""
    threads: int | None
    """CPU threads per rank; None: the host's cores shared by its ranks."""


@dataclass(frozen=True)
class Outputs:
    log_dir: Path
    """metrics.jsonl, TensorBoard events and summary.json."""
    checkpoint_dir: Path
    """Rank 0's checkpoint after each epoch."""
    resume: bool
    """Continue from the checkpoint in checkpoint_dir, if there is one."""
    no_progress: bool
    progress_every: float
    """Seconds between progress lines where stderr is not a terminal."""
    log_interval: int | None
    """Rank 0's batch loss every N batches, in metrics.jsonl and on the console; None: off."""


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
    """Timed training steps instead of epochs; None: train for epochs."""
    warmup_steps: int
    """Untimed steps before them."""
    synthetic: bool
    """Random images made once on the device instead of MNIST."""
    image_size: int
    """Height and width of the synthetic images of the resnet models."""


@dataclass(frozen=True)
class Placement:
    """Where the ranks run, known once Horovod has started: the options that
    depend on it are checked then, by validate() with a placement."""

    controller: str
    """mpi or gloo."""
    on_gpu: bool
    """The ranks train on GPUs."""


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run, by section. The PyTorch trainer's own (torch,
    benchmark) are None in the other trainers' runs."""

    data: Data
    schedule: Schedule
    horovod: Horovod
    device: Device
    outputs: Outputs
    launch: Launch
    torch: Torch | None = None
    benchmark: Benchmark | None = None

    def as_record(self) -> dict:
        """The options of this run as JSON values, for summary.json and
        --check-options: one flat mapping by option name (--benchmark-steps
        is benchmark_steps), of the sections the run has."""
        record = {}
        for section in (self.data, self.schedule, self.horovod, self.device, self.outputs,
                        self.launch, self.torch, self.benchmark):
            if section is not None:
                record.update(dataclasses.asdict(section))
        if self.benchmark is not None:
            record["benchmark_steps"] = record.pop("steps")
        return {k: str(v) if isinstance(v, os.PathLike) else v for k, v in record.items()}


# What horovodrun (over Gloo, over MPI) sets in each rank's environment.
LAUNCHED_RANK = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")


# Options that shape something a kind of run does not have, so that it
# would ignore them without a word: (the option as the user typed it, whether
# the config has it). An elastic run's ranks change under it (no batch-norm
# sync, accumulation or DataLoader sized for them) and Horovod's elastic
# optimizer averages; a benchmark run times plain steps, with no checkpoint,
# no evaluation and no schedule.
GIVEN = {
    "--resume": lambda c: c.outputs.resume,
    "--use-adasum": lambda c: c.horovod.use_adasum,
    "--sync-bn": lambda c: c.torch.sync_bn,
    "--backward-passes-per-step": lambda c: c.torch.backward_passes_per_step != 1,
    "--data-pipeline loader": lambda c: c.torch.data_pipeline == "loader",
    "--target-accuracy": lambda c: c.schedule.target_accuracy is not None,
    "--label-smoothing": lambda c: c.torch.label_smoothing != 0,
    "--benchmark-steps": lambda c: c.benchmark.steps is not None,
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


def validate(config: RunConfig, framework: str, mnist_models: tuple[str, ...] = (),
             placement: Placement | None = None) -> str | None:
    """The first problem of the config's options taken together, as one
    phrase, or None: every clash between options is checked here, and
    nowhere else. `framework` is the trainer's (pytorch, tensorflow, mxnet);
    `mnist_models` are the networks that take MNIST (the others take
    synthetic images only). The trainer checks once as it parses, and again
    with the placement once Horovod has started."""
    horovod, torch, bench, launch = config.horovod, config.torch, config.benchmark, config.launch
    if launch.num_proc is None and (launch.hosts or launch.communication):
        return ("--hosts and --communication say where --num-proc starts its ranks: add "
                "--num-proc N (or start the ranks with horovodrun)")
    if launch.num_proc is not None and any(name in os.environ for name in LAUNCHED_RANK):
        return "--num-proc starts the ranks itself: run the command without horovodrun"
    if horovod.gradient_predivide_factor != 1.0 and horovod.use_adasum:
        return ("--gradient-predivide-factor scales Horovod's averaging: it does not combine "
                "with --use-adasum")
    if horovod.use_adasum and framework == "mxnet":
        return ("--use-adasum: Horovod's MXNet DistributedTrainer has no Adasum "
                "(use the PyTorch or TensorFlow trainer)")
    if torch is not None:
        for mode, on in (("--elastic", torch.elastic),
                         ("--benchmark-steps", bench.steps is not None)):
            given = [option for option in REFUSED_BY[mode] if on and GIVEN[option](config)]
            if given:
                return f"{mode} does not combine with {', '.join(given)}"
        problem = input_problem(torch.model, bench.synthetic, bench.steps is not None,
                                mnist_models)
        if problem:
            return problem
    if placement is None:
        return None
    if horovod.use_adasum and placement.controller != "mpi":
        return ("--use-adasum needs the MPI controller (horovodrun --mpi): "
                f"Horovod implements Adasum over MPI only ({framework})")
    if torch is not None and torch.sync_bn and not placement.on_gpu:
        return "--sync-bn needs GPUs: Horovod's SyncBatchNorm works on CUDA tensors only"
    return amp_problem(torch.amp, placement.on_gpu) if torch is not None else None


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
