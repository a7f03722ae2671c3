"""The run's configuration: every trainer option, read once (options.py
parses the command line) into frozen sections, each field with a line of
doc; a framework's own options in its FrameworkOptions, which its part of
the package defines (torch/options.py). validate() is the one place where
options are checked against each other."""

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
class Placement:
    """Where the ranks run, known once Horovod has started: the options that
    depend on it are checked then, by validate() with a placement."""

    controller: str
    """mpi or gloo."""
    on_gpu: bool
    """The ranks train on GPUs."""


@dataclass(frozen=True)
class FrameworkOptions:
    """A framework's own options, which its part of the package builds
    (torch/options.py's PyTorchOptions adds its sections): here, a framework
    with none of its own. validate() asks it for the clashes only it knows."""

    name: str
    """pytorch, tensorflow or mxnet: the trainer's framework, for messages."""

    def problem(self, config: "RunConfig", placement: "Placement | None") -> str | None:
        """The first clash of this framework's options, as validate() gives it, or None."""
        return None

    def as_record(self) -> dict:
        """The framework's options as RunConfig.as_record() gives them."""
        return {}


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run, by section; the framework's own in its
    FrameworkOptions."""

    data: Data
    schedule: Schedule
    horovod: Horovod
    device: Device
    outputs: Outputs
    launch: Launch
    framework: FrameworkOptions

    def as_record(self) -> dict:
        """The options of this run as JSON values, for summary.json and
        --check-options: one flat mapping by option name, of the sections
        the run has."""
        record = {}
        for section in (self.data, self.schedule, self.horovod, self.device, self.outputs,
                        self.launch):
            record.update(dataclasses.asdict(section))
        record.update(self.framework.as_record())
        return {k: str(v) if isinstance(v, os.PathLike) else v for k, v in record.items()}


# What horovodrun (over Gloo, over MPI) sets in each rank's environment.
LAUNCHED_RANK = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")


def validate(config: RunConfig, placement: Placement | None = None) -> str | None:
    """The first problem of the config's options taken together, as one
    phrase, or None: every clash between options is checked here, those of
    the framework's own options by its FrameworkOptions.problem, and nowhere
    else. The trainer checks once as it parses, and again with the
    placement once Horovod has started."""
    horovod, launch, framework = config.horovod, config.launch, config.framework
    if launch.num_proc is None and (launch.hosts or launch.communication):
        return ("--hosts and --communication say where --num-proc starts its ranks: add "
                "--num-proc N (or start the ranks with horovodrun)")
    if launch.num_proc is not None and any(name in os.environ for name in LAUNCHED_RANK):
        return "--num-proc starts the ranks itself: run the command without horovodrun"
    if horovod.gradient_predivide_factor != 1.0 and horovod.use_adasum:
        return ("--gradient-predivide-factor scales Horovod's averaging: it does not combine "
                "with --use-adasum")
    problem = framework.problem(config, placement)
    if problem or placement is None:
        return problem
    if horovod.use_adasum and placement.controller != "mpi":
        return ("--use-adasum needs the MPI controller (horovodrun --mpi): "
                f"Horovod implements Adasum over MPI only ({framework.name})")
    return None
