"""The one epoch loop of every trainer: PyTorch, PyTorch elastic, TensorFlow
and MXNet each implement a Trainer (their model, optimizer, data and
collectives), and everything else is shared: the learning-rate schedule,
metrics summed over ranks, rank 0's checkpoints, logs and lines, the stop at
--target-accuracy, and the closing summary, with the same fields whatever
the framework.

A framework's train_batch may return device tensors (PyTorch does): the
loop only adds them up, so nothing waits for the device until the epoch's
end, and the allreduces that backward() starts overlap the rest of the step.

A loss that is not finite stops the run: each trainer's step averages the
loss over the ranks beside the gradients and applies check_loss, so every
rank raises NonFiniteLoss at the same step; rank 0 says where and what to
change in one line, nothing more is written (the last checkpoint stays as
it was), and every rank exits 1. An epoch's summed training or test loss
that is not finite (a check that comes after the epoch's last step, an
update that diverged at it) stops the run the same way before the epoch's
checkpoint.
"""

import abc
import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from horovod_train.core import (
    console,
    distributed,
    lr_schedule,
    metrics,
    phases,
    runtime,
    watchdog,
)
from horovod_train.core.config import RunConfig
from horovod_train.core.errors import RunFailed, print_error, program

# The module whose version a framework's run records (runtime.versions).
FRAMEWORK_MODULES = {"pytorch": "torch"}

# (loss sum, correct, images) of a batch: numbers, or tensors on the device.
BatchSums = tuple[Any, Any, int]


def no_op(*_) -> None:
    pass


class NonFiniteLoss(RunFailed):
    """A step's loss, averaged over the ranks, that is not a finite number
    (check_loss): every rank raises it at the same step. The loop ends the
    run with its own line (stop_diverged); outside the loop (a benchmark's
    steps) it is a RunFailed of its own."""

    def __init__(self, loss: float, steps_back: int = 0):
        super().__init__(f"the training loss is {loss}: training diverged")
        self.loss = loss
        self.steps_back = steps_back  # the loss's step: this many before the one raising
        self.batch: int | None = None  # the raising batch's index in train_epoch's batches


def check_loss(agreed: float, steps_back: int = 0) -> None:
    """The rule, once per optimizer step, on the loss the ranks agreed on
    (their average, reduced with the step's gradients): a nan or an infinity
    on any one rank makes the average one, so all ranks stop together.
    steps_back: the loss is that of this many steps before the current one."""
    if not math.isfinite(agreed):
        raise NonFiniteLoss(agreed, steps_back)


def diverged_line(config: RunConfig, what: str, epoch: int, step: str, lr: float,
                  advice: Iterable[str] = ()) -> str:
    """The one line of a run stopped by a loss that is not finite: which
    loss (`what`, its value), at which epoch (0-based) and step (`step`:
    "step 3/25", or how the test loss was reached), the learning rate there,
    what is kept, and the options to change (the trainer adds its own,
    `advice`)."""
    schedule = config.schedule
    kept = (f"the checkpoint after epoch {epoch} is kept as it was" if epoch
            else "no checkpoint was written")
    changes = [f"lower --lr ({schedule.lr:g} in this run)",
               f"lengthen --warmup-epochs ({schedule.warmup_epochs:g} in this run)"]
    if config.horovod.fp16_allreduce:
        changes.append("drop --fp16-allreduce (float16 gradients overflow)")
    changes += advice
    change = f"{', '.join(changes[:-1])} or {changes[-1]}"
    return (f"training diverged: {what} at epoch {epoch + 1}/{schedule.epochs}, {step} "
            f"(learning rate {lr:g}); stopped there, {kept}. {change[0].upper()}{change[1:]}")


def check_epoch(trainer: "Trainer", is_root: bool, config: RunConfig, record: dict, epoch: int,
                steps_per_epoch: int, lr_at: Callable[[int], float]) -> None:
    """Before an epoch's outputs: its losses (summed over ranks, the same on
    all of them) must be finite. The training loss is not only where the
    last step's check comes later than the step (PyTorch alone on a GPU);
    the test loss is not where the last step's update diverged."""
    last = (epoch + 1) * steps_per_epoch - 1
    for what in ("train_loss", "test_loss"):
        if not math.isfinite(record[what]):
            stop_diverged(trainer, is_root, diverged_line(
                config, f"{'loss' if what == 'train_loss' else 'test loss'} {record[what]}",
                epoch, f"step {steps_per_epoch}/{steps_per_epoch}" if what == "train_loss"
                else "after its last step", lr_at(last), trainer.divergence_advice()))


def stop_diverged(trainer: "Trainer", is_root: bool, line: str) -> NoReturn:
    """End every rank (all of them got here at the same step): rank 0 says
    the line, the others wait for it (a launcher ends the whole job when the
    first rank exits), then all exit 1 without a second line."""
    if is_root:
        print_error(program(), line)
    trainer.allgather_object(None, name="diverged")
    raise RunFailed(line, said=True)


class Trainer(abc.ABC):
    """A framework's side of training, as the loop calls it. A subclass sets
    the attributes below in its constructor and implements the abstract
    methods; the others have the behaviour most trainers want."""

    framework: str  # summary.json's "framework": pytorch, tensorflow, mxnet
    model_name: str
    n_train: int  # images in the whole training split, and in the test split
    n_test: int
    lr_scale: float  # the peak learning rate as a multiple of --lr (lr_schedule.lr_scale)
    batches_per_epoch: int  # the same on every rank: the shards are padded
    batches_per_step: int = 1  # batches whose gradients one optimizer step averages
    watch_stalls: bool = True  # end the job when a rank stops answering (--stall-limit)

    @abc.abstractmethod
    def epoch_batches(self, epoch: int) -> Iterable:
        """This rank's training batches of `epoch`, (images, labels) each."""

    @abc.abstractmethod
    def train_batch(self, images, labels) -> BatchSums:
        """Forward, backward, and the optimizer step when one is due."""

    @abc.abstractmethod
    def eval_batches(self) -> Iterable:
        """This rank's disjoint slice of the test split, as batches."""

    @abc.abstractmethod
    def eval_batch(self, images, labels) -> BatchSums:
        """The batch's sums in inference mode."""

    @abc.abstractmethod
    def set_lr(self, lr: float) -> None:
        """The optimizer's learning rate from now on."""

    @abc.abstractmethod
    def sum_across_ranks(self, values: list[float], name: str) -> list[float]:
        """Each value summed over all ranks (an allreduce)."""

    @abc.abstractmethod
    def allgather_object(self, obj, name: str) -> list:
        """Every rank's `obj`, in rank order (hvd.allgather_object)."""

    @abc.abstractmethod
    def average_buffers(self) -> None:
        """Batch-norm statistics, averaged over ranks before evaluation."""

    @abc.abstractmethod
    def save_checkpoint(self, epochs_done: int, extra: dict) -> None:
        """Rank 0's checkpoint after `epochs_done` epochs; `extra` goes in it."""

    @abc.abstractmethod
    def digest(self) -> str:
        """A digest of the weights, to show every rank ends with the same."""

    def start_epoch(self, epoch: int) -> None:
        """Before an epoch's first batch (training mode, the epoch's random draws)."""
        return None  # nothing, unless a trainer needs it

    def start_eval(self) -> None:
        """Before evaluation (inference mode)."""
        return None  # nothing, unless a trainer needs it

    def end_epoch(self, epoch: int) -> None:
        """After the epoch's checkpoint (elastic: commit)."""
        return None  # nothing, unless a trainer needs it

    def learning_rate(self, step: int, scheduled: Callable[[int], float]) -> float:
        """The learning rate at optimizer step `step`: the run's schedule over
        its epochs (`scheduled`), unless a trainer counts otherwise."""
        return scheduled(step)

    def summary_fields(self) -> dict:
        """The framework's own entries of summary.json (PyTorch on GPUs: "nccl")."""
        return {}

    def describe(self) -> str:
        """A few words for the run's first line about the framework's own
        choices (PyTorch: its precision), or nothing."""
        return ""

    def step_in_epoch(self, batch: int) -> int:
        """The optimizer step (0-based, in the epoch) that the `batch`-th of
        epoch_batches() belongs to: the same unless a trainer's batches
        start mid-epoch."""
        return batch // self.batches_per_step

    def divergence_advice(self) -> list[str]:
        """The framework's own options that can stop a loss diverging, as
        words for diverged_line (PyTorch's float16)."""
        return []

    def versions(self) -> dict:
        """Versions the run used beyond those every run records
        (runtime.versions): PyTorch on GPUs adds CUDA's and NCCL's."""
        return {}


def train_epoch(train_batch: Callable[[Any, Any], BatchSums], set_lr: Callable[[float], None],
                batches: Iterable, lr_at: Callable[[int], float], first_step: int = 0,
                batches_per_step: int = 1,
                after_batch: Callable[[int, Any, int], None] = no_op
                ) -> tuple[float, float, int]:
    """Train on `batches`; returns this rank's loss sum, correct count and
    images. The sums stay on the device until this returns; after_batch gets
    the batch's index, loss sum and images."""
    loss_sum = correct = 0
    count = 0
    for i, (images, labels) in enumerate(batches):
        set_lr(lr_at(first_step + i // batches_per_step))
        try:
            batch_loss, batch_correct, images_in_batch = train_batch(images, labels)
        except NonFiniteLoss as err:
            err.batch = i
            raise
        loss_sum = loss_sum + batch_loss
        correct = correct + batch_correct
        count += images_in_batch
        after_batch(i, batch_loss, images_in_batch)
    return float(loss_sum), float(correct), count


def evaluate(trainer: Trainer, after_batch: Callable[[], None] = no_op) -> dict:
    """Test loss and accuracy: each rank scores its slice, the sums over
    ranks are exact."""
    trainer.start_eval()
    loss_sum = correct = 0
    count = 0
    for images, labels in trainer.eval_batches():
        batch_loss, batch_correct, images_in_batch = trainer.eval_batch(images, labels)
        loss_sum = loss_sum + batch_loss
        correct = correct + batch_correct
        count += images_in_batch
        after_batch()
    loss_sum, correct, count = trainer.sum_across_ranks(
        [float(loss_sum), float(correct), float(count)], "eval")
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count}


def write_epoch(rt, log: metrics.MetricsLog, trainer: Trainer, record: dict) -> None:
    """Rank 0's files of an epoch: its metrics line, then the checkpoint, so
    that the last checkpoint never runs ahead of the metrics."""
    if rt.is_root:
        log.log_epoch(record)
        trainer.save_checkpoint(record["epoch"], {"metrics": record, "world_size": rt.size})


def train_one_epoch(trainer: Trainer, epoch: int, lr_at: Callable[[int], float],
                    steps_per_epoch: int, config: RunConfig, is_root: bool,
                    dog, log: metrics.MetricsLog) -> tuple[float, float, int, float]:
    """One epoch of training, with rank 0's progress and the watchdog's
    heartbeat after every batch, and rank 0's loss every --log-interval
    batches: this rank's loss sum, correct count, images and seconds."""
    trainer.start_epoch(epoch)
    batches = trainer.batches_per_epoch
    bar = console.progress(batches, f"epoch {epoch + 1}/{config.schedule.epochs}",
                           enabled=is_root and not config.outputs.no_progress,
                           every_s=config.outputs.progress_every)
    interval = config.outputs.log_interval if is_root else None

    def after_batch(i: int, batch_loss, images: int):
        bar.update()
        dog.beat()
        if interval and (i + 1) % interval == 0:
            # The loss of rank 0's own batch, as upstream's examples print it.
            record = {"epoch": epoch + 1, "batch": i + 1, "batches": batches,
                      "train_loss": float(batch_loss) / images,
                      "lr": lr_at(epoch * steps_per_epoch + i // trainer.batches_per_step)}
            log.log_batch(record, step=epoch * batches + i + 1)
            console.say(metrics.format_batch(record))

    tic = time.perf_counter()
    try:
        loss_sum, correct, count = train_epoch(
            trainer.train_batch, trainer.set_lr,
            itertools.islice(trainer.epoch_batches(epoch), trainer.batches_per_epoch), lr_at,
            first_step=epoch * steps_per_epoch, batches_per_step=trainer.batches_per_step,
            after_batch=after_batch)
    except NonFiniteLoss as err:
        bar.close()
        step = trainer.step_in_epoch(err.batch) - err.steps_back
        stop_diverged(trainer, is_root, diverged_line(
            config, f"loss {err.loss}", epoch, f"step {step + 1}/{steps_per_epoch}",
            lr_at(epoch * steps_per_epoch + step), trainer.divergence_advice()))
    seconds = time.perf_counter() - tic
    bar.close()
    return loss_sum, correct, count, seconds


def fit(config: RunConfig, rt, trainer: Trainer, epochs_done: int, started: float) -> dict:
    """Train from `epochs_done` to the last epoch, or to the first epoch that
    reaches the target accuracy; return the run's summary. `started` is the
    trainer's start on time.perf_counter()'s clock (the summary's wall time
    counts from it)."""
    schedule = config.schedule
    steps_per_epoch = trainer.batches_per_epoch // trainer.batches_per_step
    log = metrics.MetricsLog(config.outputs.log_dir, enabled=rt.is_root, epochs_done=epochs_done,
                             batches_per_epoch=trainer.batches_per_epoch)
    # Rank 0 records them (a few subprocesses); the others' summaries are not written.
    versions = ({**runtime.versions(FRAMEWORK_MODULES.get(trainer.framework, trainer.framework)),
                 **trainer.versions()} if rt.is_root else {})
    metrics.announce(rt, metrics.Announcement(
        framework=trainer.framework, model=trainer.model_name, train_images=trainer.n_train,
        test_images=trainer.n_test, lr=schedule.lr, lr_scale=trainer.lr_scale,
        epochs_done=epochs_done, choices=trainer.describe(), versions=versions,
        settings=runtime.brief_settings()))

    def scheduled_lr(step: int) -> float:
        return lr_schedule.learning_rate(step, steps_per_epoch, schedule.epochs, schedule.lr,
                                         trainer.lr_scale, schedule.warmup_epochs)

    def lr_at(step: int) -> float:
        return trainer.learning_rate(step, scheduled_lr)

    images_seen, step_seconds = 0, 0.0
    test_metrics = {"test_loss": math.nan, "test_accuracy": math.nan}
    target = {"target_accuracy": schedule.target_accuracy, "target_reached_epoch": None,
              "time_to_target_s": None}
    training_started = time.perf_counter()  # options.TIMES_EPILOG
    phases.mark("first_step")
    stall_limit = config.horovod.stall_limit if trainer.watch_stalls else 0
    with watchdog.watching(stall_limit, rt.rank, rt.hostname, trainer.allgather_object,
                           rt.network) as dog:
        for epoch in range(epochs_done, schedule.epochs):
            loss_sum, correct, count, epoch_seconds = train_one_epoch(
                trainer, epoch, lr_at, steps_per_epoch, config, rt.is_root, dog, log)
            images_seen += count
            step_seconds += epoch_seconds

            trainer.average_buffers()
            test_metrics = evaluate(trainer, dog.beat)
            # Every rank sees the same accuracy (summed over ranks), so all stop together.
            reached = (schedule.target_accuracy is not None
                       and test_metrics["test_accuracy"] >= schedule.target_accuracy)
            if reached:
                target.update(target_reached_epoch=epoch + 1,
                              time_to_target_s=time.perf_counter() - training_started)
            record = metrics.epoch_record(
                epoch + 1, lr_at((epoch + 1) * steps_per_epoch - 1),
                trainer.sum_across_ranks([loss_sum, correct, count, count / epoch_seconds],
                                       f"train.{epoch}"),
                test_metrics, epoch_seconds)
            check_epoch(trainer, rt.is_root, config, record, epoch, steps_per_epoch, lr_at)
            # Every rank learns if rank 0 could not write (a full disk), and all
            # end with its one line instead of waiting in their next collective.
            distributed.check_all_ranks(trainer.allgather_object, rt.rank,
                                        functools.partial(write_epoch, rt, log, trainer, record),
                                        "epoch outputs")
            dog.beat()
            if rt.is_root:
                console.say(metrics.format_epoch(record))
                if reached:
                    console.say(f"reached test accuracy {schedule.target_accuracy} after epoch "
                                f"{epoch + 1}, {target['time_to_target_s']:.1f} s of training")
            if reached or epoch + 1 == schedule.epochs:
                phases.mark("answer")
            trainer.end_epoch(epoch)
            if reached:
                break
        train_seconds = time.perf_counter() - training_started
        log.close()
        if epochs_done >= schedule.epochs:
            test_metrics = evaluate(trainer, dog.beat)

        mine = metrics.rank_figures(rt, images_seen, step_seconds, train_seconds, trainer.digest())
        ranks = trainer.allgather_object(mine, name="summary")
    summary = metrics.build_summary(trainer.framework, trainer.model_name, rt, ranks, test_metrics,
                                    schedule.epochs, epochs_done, time.perf_counter() - started,
                                    config)
    summary.update(target)
    summary.update(trainer.summary_fields())
    summary.update(versions=versions, settings=dict(runtime.APPLIED), phases=phases.record())
    return metrics.finish_run(rt, config.outputs.log_dir, summary)
