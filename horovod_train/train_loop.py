"""The epoch loop of the TensorFlow and MXNet trainers. Both read MNIST as
numpy batches, so everything but the framework's own calls is shared: shards
per epoch, the learning-rate schedule, metrics summed over ranks, rank 0's
checkpoints and logs, and the closing summary. A trainer hands in its calls
as a Steps."""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from horovod_train import console, lr_schedule, metrics, mnist, sharding


@dataclass
class Steps:
    """A framework's side of training. Images come normalised, (N, 28, 28)
    float32; each framework adds the channel axis where it wants it."""

    set_lr: Callable[[float], None]
    train_batch: Callable[[np.ndarray, np.ndarray], tuple[float, float]]  # -> loss sum, correct
    eval_batch: Callable[[np.ndarray, np.ndarray], tuple[float, float]]
    sum_across_ranks: Callable[[list[float], str], list[float]]
    average_buffers: Callable[[], None]  # batch-norm statistics, averaged over ranks
    save_checkpoint: Callable[[int, dict], None]  # epochs done, extra; rank 0 only
    digest: Callable[[], str]
    allgather_object: Callable


def normalise(images: np.ndarray) -> np.ndarray:
    return (images.astype(np.float32) / 255.0 - mnist.MEAN) / mnist.STD


def batches(indices: np.ndarray, batch_size: int):
    for start in range(0, len(indices), batch_size):
        yield indices[start:start + batch_size]


def fit(args, rt, steps: Steps, train: mnist.Split, test: mnist.Split, epochs_done: int,
        framework: str, model_name: str, lr_scale: float, started: float) -> dict:
    """Train from `epochs_done` to args.epochs; return the run's summary."""
    # prepare_run has checked that the shard holds at least one batch.
    steps_per_epoch = math.ceil(sharding.shard_size(len(train), rt.size) / args.batch_size)
    log = metrics.MetricsLog(args.log_dir, enabled=rt.is_root, epochs_done=epochs_done)
    metrics.announce(rt, framework, model_name, len(train), len(test), args.lr, lr_scale,
                     epochs_done)

    images_seen, step_seconds = 0, 0.0
    test_metrics = {"test_loss": math.nan, "test_accuracy": math.nan}
    training_started = time.perf_counter()  # options.TIMES_EPILOG
    for epoch in range(epochs_done, args.epochs):
        indices = sharding.epoch_indices(len(train), rt.rank, rt.size, epoch, args.seed)
        bar = console.progress(steps_per_epoch, f"epoch {epoch + 1}/{args.epochs}",
                               enabled=rt.is_root and not args.no_progress,
                               every_s=args.progress_every)
        loss_sum = correct = 0.0
        tic = time.perf_counter()
        for i, batch in enumerate(batches(indices, args.batch_size)):
            lr = lr_schedule.learning_rate(epoch * steps_per_epoch + i, steps_per_epoch,
                                           args.epochs, args.lr, lr_scale, args.warmup_epochs)
            steps.set_lr(lr)
            batch_loss, batch_correct = steps.train_batch(normalise(train.images[batch]),
                                                          train.labels[batch])
            loss_sum += batch_loss
            correct += batch_correct
            bar.update()
        epoch_seconds = time.perf_counter() - tic
        bar.close()
        images_seen += len(indices)
        step_seconds += epoch_seconds

        steps.average_buffers()
        test_metrics = evaluate(steps, test, rt, args.test_batch_size)
        record = metrics.epoch_record(
            epoch + 1, lr,
            steps.sum_across_ranks([loss_sum, correct, len(indices),
                                    len(indices) / epoch_seconds], f"train.{epoch}"),
            test_metrics, epoch_seconds)
        log.log_epoch(record)
        if rt.is_root:
            steps.save_checkpoint(epoch + 1, {"metrics": record, "world_size": rt.size})
            console.say(metrics.format_epoch(record))
    train_seconds = time.perf_counter() - training_started
    log.close()
    if epochs_done >= args.epochs:
        test_metrics = evaluate(steps, test, rt, args.test_batch_size)

    mine = metrics.rank_figures(rt, images_seen, step_seconds, train_seconds, steps.digest())
    ranks = steps.allgather_object(mine, name="summary")
    summary = metrics.build_summary(framework, model_name, rt, ranks, test_metrics, args.epochs,
                                    epochs_done, time.perf_counter() - started, args)
    return metrics.finish_run(rt, args.log_dir, summary)


def evaluate(steps: Steps, test: mnist.Split, rt, batch_size: int) -> dict:
    """Each rank scores a disjoint slice; the sums over ranks are exact."""
    loss_sum = correct = 0.0
    indices = sharding.eval_indices(len(test), rt.rank, rt.size)
    for batch in batches(indices, batch_size):
        batch_loss, batch_correct = steps.eval_batch(normalise(test.images[batch]),
                                                     test.labels[batch])
        loss_sum += batch_loss
        correct += batch_correct
    loss_sum, correct, count = steps.sum_across_ranks([loss_sum, correct, len(indices)], "eval")
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count}
