"""The one epoch loop of every trainer: PyTorch, PyTorch elastic, TensorFlow
and MXNet hand in their own calls as a Steps, and everything else is shared: the learning-rate
schedule, metrics summed over ranks, rank 0's checkpoints, logs and lines,
the stop at --target-accuracy, and the closing summary, with the same
fields whatever the framework.

A framework's train_batch may return device tensors (PyTorch does): the
loop only adds them up, so nothing waits for the device until the epoch's
end, and the allreduces that backward() starts overlap the rest of the step.
"""

import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from horovod_train import console, distributed, lr_schedule, metrics, watchdog
from horovod_train.options import RunConfig

# (loss sum, correct, images) of a batch: numbers, or tensors on the device.
BatchSums = tuple[Any, Any, int]


def no_op(*_) -> None:
    pass


@dataclass
class Steps:
    """A framework's side of training."""

    batches_per_epoch: int  # the same on every rank: the shards are padded
    epoch_batches: Callable[[int], Iterable]  # this rank's training batches of an epoch
    train_batch: Callable[[Any, Any], BatchSums]  # forward, backward, and the step when due
    eval_batches: Callable[[], Iterable]  # this rank's disjoint slice of the test split
    eval_batch: Callable[[Any, Any], BatchSums]
    set_lr: Callable[[float], None]
    sum_across_ranks: Callable[[list[float], str], list[float]]
    average_buffers: Callable[[], None]  # batch-norm statistics, averaged over ranks
    save_checkpoint: Callable[[int, dict], None]  # epochs done, extra; rank 0 only
    digest: Callable[[], str]  # of the weights, to show every rank ends with the same
    allgather_object: Callable
    start_epoch: Callable[[int], None] = no_op  # training mode, the epoch's random draws
    start_eval: Callable[[], None] = no_op
    end_epoch: Callable[[int], None] = no_op  # after the epoch's checkpoint (elastic: commit)
    batches_per_step: int = 1  # batches whose gradients one optimizer step averages
    # The learning rate at an optimizer step; by default the schedule of
    # lr_schedule over the run's epochs (elastic counts samples instead).
    lr_at: Callable[[int], float] | None = None
    # The framework's own entries of summary.json (PyTorch on GPUs: "nccl").
    summary_fields: dict = field(default_factory=dict)


def train_epoch(train_batch: Callable[[Any, Any], BatchSums], set_lr: Callable[[float], None],
                batches: Iterable, lr_at: Callable[[int], float], first_step: int = 0,
                batches_per_step: int = 1,
                after_batch: Callable[[], None] = no_op) -> tuple[float, float, int]:
    """Train on `batches`; returns this rank's loss sum, correct count and
    images. The sums stay on the device until this returns."""
    loss_sum = correct = 0
    count = 0
    for i, (images, labels) in enumerate(batches):
        set_lr(lr_at(first_step + i // batches_per_step))
        batch_loss, batch_correct, images_in_batch = train_batch(images, labels)
        loss_sum = loss_sum + batch_loss
        correct = correct + batch_correct
        count += images_in_batch
        after_batch()
    return float(loss_sum), float(correct), count


def evaluate(steps: Steps, after_batch: Callable[[], None] = no_op) -> dict:
    """Test loss and accuracy: each rank scores its slice, the sums over
    ranks are exact."""
    steps.start_eval()
    loss_sum = correct = 0
    count = 0
    for images, labels in steps.eval_batches():
        batch_loss, batch_correct, images_in_batch = steps.eval_batch(images, labels)
        loss_sum = loss_sum + batch_loss
        correct = correct + batch_correct
        count += images_in_batch
        after_batch()
    loss_sum, correct, count = steps.sum_across_ranks(
        [float(loss_sum), float(correct), float(count)], "eval")
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count}


def write_epoch(rt, log: metrics.MetricsLog, steps: Steps, record: dict) -> None:
    """Rank 0's files of an epoch: its metrics line, then the checkpoint, so
    that the last checkpoint never runs ahead of the metrics."""
    if rt.is_root:
        log.log_epoch(record)
        steps.save_checkpoint(record["epoch"], {"metrics": record, "world_size": rt.size})


def fit(config: RunConfig, rt, steps: Steps, n_train: int, n_test: int, epochs_done: int,
        framework: str, model_name: str, lr_scale: float, started: float) -> dict:
    """Train from `epochs_done` to config.epochs, or to the first epoch that
    reaches config.target_accuracy; return the run's summary."""
    steps_per_epoch = steps.batches_per_epoch // steps.batches_per_step
    log = metrics.MetricsLog(config.log_dir, enabled=rt.is_root, epochs_done=epochs_done)
    metrics.announce(rt, framework, model_name, n_train, n_test, config.lr, lr_scale, epochs_done)

    def scheduled_lr(step: int) -> float:
        return lr_schedule.learning_rate(step, steps_per_epoch, config.epochs, config.lr, lr_scale,
                                         config.warmup_epochs)

    lr_at = steps.lr_at or scheduled_lr

    images_seen, step_seconds = 0, 0.0
    test_metrics = {"test_loss": math.nan, "test_accuracy": math.nan}
    target = {"target_accuracy": config.target_accuracy, "target_reached_epoch": None,
              "time_to_target_s": None}
    training_started = time.perf_counter()  # options.TIMES_EPILOG
    # Elastic runs leave lost ranks to Horovod Elastic (its own timeouts).
    stall_limit = 0 if config.elastic else config.stall_limit
    with watchdog.watching(stall_limit, rt.rank, rt.hostname, steps.allgather_object) as dog:
        for epoch in range(epochs_done, config.epochs):
            steps.start_epoch(epoch)
            bar = console.progress(steps.batches_per_epoch,
                                   f"epoch {epoch + 1}/{config.epochs}",
                                   enabled=rt.is_root and not config.no_progress,
                                   every_s=config.progress_every)

            def after_batch(bar=bar):
                bar.update()
                dog.beat()

            tic = time.perf_counter()
            loss_sum, correct, count = train_epoch(
                steps.train_batch, steps.set_lr,
                itertools.islice(steps.epoch_batches(epoch), steps.batches_per_epoch), lr_at,
                first_step=epoch * steps_per_epoch, batches_per_step=steps.batches_per_step,
                after_batch=after_batch)
            epoch_seconds = time.perf_counter() - tic
            bar.close()
            images_seen += count
            step_seconds += epoch_seconds

            steps.average_buffers()
            test_metrics = evaluate(steps, dog.beat)
            # Every rank sees the same accuracy (summed over ranks), so all stop together.
            reached = (config.target_accuracy is not None
                       and test_metrics["test_accuracy"] >= config.target_accuracy)
            if reached:
                target.update(target_reached_epoch=epoch + 1,
                              time_to_target_s=time.perf_counter() - training_started)
            record = metrics.epoch_record(
                epoch + 1, lr_at((epoch + 1) * steps_per_epoch - 1),
                steps.sum_across_ranks([loss_sum, correct, count, count / epoch_seconds],
                                       f"train.{epoch}"),
                test_metrics, epoch_seconds)
            # Every rank learns if rank 0 could not write (a full disk), and all
            # end with its one line instead of waiting in their next collective.
            distributed.check_all_ranks(steps.allgather_object, rt.rank,
                                        functools.partial(write_epoch, rt, log, steps, record),
                                        "epoch outputs")
            dog.beat()
            if rt.is_root:
                console.say(metrics.format_epoch(record))
                if reached:
                    console.say(f"reached test accuracy {config.target_accuracy} after epoch "
                                f"{epoch + 1}, {target['time_to_target_s']:.1f} s of training")
            steps.end_epoch(epoch)
            if reached:
                break
        train_seconds = time.perf_counter() - training_started
        log.close()
        if epochs_done >= config.epochs:
            test_metrics = evaluate(steps, dog.beat)

        mine = metrics.rank_figures(rt, images_seen, step_seconds, train_seconds, steps.digest())
        ranks = steps.allgather_object(mine, name="summary")
    summary = metrics.build_summary(framework, model_name, rt, ranks, test_metrics, config.epochs,
                                    epochs_done, time.perf_counter() - started, config)
    summary.update(target)
    summary.update(steps.summary_fields)
    return metrics.finish_run(rt, config.log_dir, summary)
