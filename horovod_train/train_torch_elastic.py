"""Elastic PyTorch training (`pytorch_mnist.py --elastic`, launched by
`horovodrun --min-np/--max-np --host-discovery-script`): when a host is lost
the surviving ranks roll back to the last commit and go on; when a host is
added, its ranks join at the next commit.

What survives a reset is a Horovod TorchState: model, optimizer, the epoch
and how many samples of the epoch's shuffled order are done. It is
committed every --commit-every steps (a copy in memory on every rank, and
the point where Horovod checks for added or removed hosts). Every sample is
trained on once per epoch whatever the number of ranks (sharding.elastic_batch);
the learning rate follows the number of ranks at each step.

Before the elastic loop nothing talks to other ranks: a rank that joins a
running job starts here while the others are mid-epoch, so data and model are
set up locally and the state arrives by broadcast from rank 0 inside
hvd.elastic.run. Rank 0 appends every commit and reset to
LOG_DIR/elastic.jsonl, so an operator (and the tests) can see what was lost:
a reset resumes at the last commit, never earlier."""

import json
import math
import time
from pathlib import Path

import horovod.torch as hvd
import torch

from horovod_train import (
    console,
    device_data,
    distributed,
    lr_schedule,
    mnist,
    outputs,
    sharding,
    train_loop,
)
from horovod_train.models import build_model
from horovod_train.options import RunConfig
from horovod_train.train_torch import (
    batch_trainer,
    distributed_optimizer,
    eval_batch,
    init,
    model_steps,
)


class EventLog:
    """Rank 0's commits and resets, one JSON line each, flushed at once."""

    def __init__(self, log_dir: Path):
        self.path = Path(log_dir) / "elastic.jsonl"

    def write(self, event: str, **fields) -> None:
        if hvd.rank() != 0:
            return
        record = {"event": event, "time": time.time(), "size": hvd.size(), **fields}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        console.say(f"elastic: {event} " + " ".join(f"{k}={v}" for k, v in record.items()
                                                    if k not in ("event", "time")))


def run(config: RunConfig) -> dict:
    started = time.perf_counter()
    rt, device = init(use_cuda=not config.no_cuda, threads=config.threads, seed=config.seed)
    threads = rt.threads
    if rt.is_root:
        outputs.prepare_output_dirs(config.log_dir, config.checkpoint_dir)
    # Local only (see the module's docstring): a bad data directory ends this rank.
    train_split, test_split = mnist.load_train_test(config.data_dir,
                                                    download=not config.no_download)
    train_data = device_data.DeviceMnist(train_split, device)
    test_data = device_data.DeviceMnist(test_split, device)
    model = build_model(config.model, config.memory_format).to(device)
    optimizer = distributed_optimizer(model, config.lr, config.momentum, config.fp16_allreduce)
    events = EventLog(config.log_dir)
    n_train = len(train_data)

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, samples_done=0,
                                   steps=0)
    # Runs after a lost rank's rollback to the last commit (or after hosts
    # were added at a commit): the position training goes on from.
    state.register_reset_callbacks([lambda: events.write(
        "reset", epoch=state.epoch, samples_done=state.samples_done)])

    def lr_now(_step: int) -> float:
        # The schedule counted in samples, so it does not depend on the
        # number of ranks; the peak scales with the ranks there are now.
        return lr_schedule.learning_rate(
            state.epoch * n_train + state.samples_done, n_train, config.epochs, config.lr,
            float(hvd.size()), config.warmup_epochs)

    step = batch_trainer(model, optimizer, device, amp_dtype=None,
                         scaler=torch.amp.GradScaler("cuda", enabled=False), passes=1,
                         label_smoothing=config.label_smoothing)

    def train_batch(images, labels) -> train_loop.BatchSums:
        """The step, then the position in the epoch moves on; a commit every
        --commit-every steps."""
        sums = step(images, labels)
        state.samples_done = min(n_train, state.samples_done + hvd.size() * config.batch_size)
        state.steps += 1
        if state.steps % config.commit_every == 0:
            commit()
        return sums

    def commit() -> None:
        """state.commit(), logged between its two halves: the check for new
        or lost hosts can interrupt right after the save, and a reset then
        goes back to this commit, which the log must already hold."""
        state.save()
        events.write("commit", epoch=state.epoch, samples_done=state.samples_done)
        state.check_host_updates()

    def epoch_batches(epoch: int):
        """From the position the state holds (after a reset, the last
        commit's) to the end of the epoch, each rank its share of every
        batch of the ranks there are now."""
        order = sharding.epoch_order(n_train, epoch, config.seed)
        while state.samples_done < n_train:
            indices = sharding.elastic_batch(order, state.samples_done, hvd.rank(), hvd.size(),
                                             config.batch_size)
            yield train_data.batch(torch.from_numpy(indices).to(device))

    def end_epoch(epoch: int) -> None:
        state.epoch, state.samples_done = epoch + 1, 0
        commit()

    @hvd.elastic.run
    def train(state) -> dict:
        # Entered at the start and again after every reset, with the ranks
        # there are then, from the epoch and position of the last commit.
        rt = distributed.describe(hvd, str(device), threads)
        steps = model_steps(
            model, optimizer, config,
            batches_per_epoch=math.ceil(n_train / (rt.size * config.batch_size)),
            epoch_batches=epoch_batches,
            train_batch=train_batch,
            eval_batches=lambda: test_data.batches(
                sharding.eval_indices(len(test_data), rt.rank, rt.size), config.test_batch_size),
            eval_batch=lambda images, labels: eval_batch(model, images, labels, device, None),
            start_epoch=lambda _: model.train(),
            lr_at=lr_now,
            end_epoch=end_epoch,
        )
        return train_loop.fit(config, rt, steps, n_train, len(test_data), state.epoch, "pytorch",
                              config.model, float(hvd.size()), started)

    return train(state)
