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
a reset resumes at the last commit, never earlier.

With --resume, the first entry into the loop (every rank together, before
any commit) loads rank 0's checkpoint, as a run of whole epochs does, and
commits it: the run goes on after the checkpoint's epochs, and a rank that
joins later takes that state from the commits like any other."""

import json
import time
from pathlib import Path

import horovod.torch as hvd
import torch

from horovod_train.core import (
    console,
    distributed,
    loop,
    lr_schedule,
    metrics,
    mnist,
    outputs,
    runtime,
    sharding,
)
from horovod_train.core.config import RunConfig
from horovod_train.torch import checkpoint, device_data
from horovod_train.torch.models import build_model
from horovod_train.torch.step import batch_trainer, eval_batch
from horovod_train.torch.trainer import TorchTrainer, distributed_optimizer, init


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


def commit(state, events: EventLog) -> None:
    """state.commit(), logged between its two halves: the check for new or
    lost hosts can interrupt right after the save, and a reset then goes
    back to this commit, which the log must already hold."""
    state.save()
    events.write("commit", epoch=state.epoch, samples_done=state.samples_done)
    state.check_host_updates()


class ElasticTrainer(TorchTrainer):
    """The elastic run's side of the loop: batches from the position the
    state holds, a commit every --commit-every steps and at each epoch's
    end, and a learning rate counted in samples. Made anew after every
    reset, with the ranks there are then."""

    watch_stalls = False  # lost ranks are Horovod Elastic's to handle, with its own timeouts

    def __init__(self, config: RunConfig, state, train_data: device_data.DeviceMnist,
                 test_data: device_data.DeviceMnist, events: EventLog, rt: runtime.Runtime):
        super().__init__(config, state.model, state.optimizer, train_data.device,
                         len(train_data), len(test_data), float(rt.size))
        self.state, self.train_data, self.test_data, self.events = (state, train_data, test_data,
                                                                   events)
        self.rank, self.size = rt.rank, rt.size
        self.batches_per_epoch = sharding.batches_per_epoch(self.n_train, rt.size,
                                                            config.schedule.batch_size)
        self.step = batch_trainer(self.model, self.optimizer, self.device, self.amp_dtype,
                                  torch.amp.GradScaler("cuda", enabled=self.use_scaler), passes=1,
                                  label_smoothing=config.framework.torch.label_smoothing)

    def start_epoch(self, epoch: int) -> None:
        self.model.train()

    def epoch_batches(self, epoch: int):
        """From the position the state holds (after a reset, the last
        commit's) to the end of the epoch, each rank its share of every
        batch of the ranks there are now."""
        order = sharding.epoch_order(self.n_train, epoch, self.config.schedule.seed)
        while self.state.samples_done < self.n_train:
            indices = sharding.elastic_batch(order, self.state.samples_done, self.rank, self.size,
                                             self.config.schedule.batch_size)
            yield self.train_data.batch(torch.from_numpy(indices).to(self.device))

    def train_batch(self, images, labels) -> loop.BatchSums:
        """The step, then the position in the epoch moves on; a commit every
        --commit-every steps."""
        sums = self.step(images, labels)
        self.state.samples_done = min(self.n_train, self.state.samples_done
                                      + self.size * self.config.schedule.batch_size)
        self.state.steps += 1
        if self.state.steps % self.config.framework.torch.commit_every == 0:
            self.commit()
        return sums

    def commit(self) -> None:
        commit(self.state, self.events)

    def step_in_epoch(self, batch: int) -> int:
        # The batches start at the state's position (after a reset, mid-epoch),
        # which a failed step has not moved yet.
        return self.state.samples_done // (self.size * self.config.schedule.batch_size)

    def end_epoch(self, epoch: int) -> None:
        self.state.epoch, self.state.samples_done = epoch + 1, 0
        self.commit()

    def eval_batches(self):
        return self.test_data.batches(sharding.eval_indices(self.n_test, self.rank, self.size),
                                      self.config.schedule.test_batch_size)

    def eval_batch(self, images, labels) -> loop.BatchSums:
        return eval_batch(self.model, images, labels, self.device, self.amp_dtype)

    def learning_rate(self, step: int, scheduled) -> float:
        # The schedule counted in samples, so it does not depend on the
        # number of ranks; the peak scales with the ranks there are now.
        schedule = self.config.schedule
        return lr_schedule.learning_rate(
            self.state.epoch * self.n_train + self.state.samples_done, self.n_train,
            schedule.epochs, schedule.lr, float(self.size), schedule.warmup_epochs)


def resume_from_checkpoint(config: RunConfig, rt: runtime.Runtime, state,
                           events: EventLog) -> None:
    """--resume, once: rank 0 restores its checkpoint (every rank learns of
    a bad one and stops with its line), every rank takes rank 0's weights
    and optimizer state, and the state commits them at the checkpoint's
    epoch."""
    out = config.outputs
    epochs_done = distributed.resume_on_root(hvd, rt, lambda: checkpoint.resume(
        out.checkpoint_dir, state.model, state.optimizer, config.framework.torch.model))
    metrics.note_checkpoint(rt, checkpoint.checkpoint_path(out.checkpoint_dir), True)
    hvd.broadcast_parameters(state.model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(state.optimizer, root_rank=0)
    state.epoch, state.samples_done, state.resumed = epochs_done, 0, True
    commit(state, events)


def run(config: RunConfig) -> dict:
    started = time.perf_counter()
    rt, device = init(use_cuda=not config.device.no_cuda, threads=config.device.threads,
                      seed=config.schedule.seed)
    threads = rt.threads
    distributed.check_placement(config, rt, device.type == "cuda")
    if rt.is_root:
        outputs.prepare_output_dirs(config.outputs.log_dir, config.outputs.checkpoint_dir)
    # Local only (see the module's docstring): a bad data directory ends this rank.
    train_split, test_split = mnist.load_train_test(config.data.data_dir,
                                                    download=not config.data.no_download)
    train_data = device_data.DeviceMnist(train_split, device)
    test_data = device_data.DeviceMnist(test_split, device)
    options = config.framework.torch
    model = build_model(options.model, options.memory_format).to(device)
    optimizer = distributed_optimizer(
        model, config.schedule.lr, config.schedule.momentum, config.horovod.fp16_allreduce,
        gradient_predivide_factor=config.horovod.gradient_predivide_factor)
    events = EventLog(config.outputs.log_dir)

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, samples_done=0,
                                   steps=0, resumed=False)
    # Runs after a lost rank's rollback to the last commit (or after hosts
    # were added at a commit): the position training goes on from.
    state.register_reset_callbacks([lambda: events.write(
        "reset", epoch=state.epoch, samples_done=state.samples_done)])

    @hvd.elastic.run
    def train(state) -> dict:
        # Entered at the start and again after every reset, with the ranks
        # there are then, from the epoch and position of the last commit.
        rt = runtime.describe(hvd, str(device), threads)
        if config.outputs.resume and not state.resumed:
            resume_from_checkpoint(config, rt, state, events)
        trainer = ElasticTrainer(config, state, train_data, test_data, events, rt)
        return loop.fit(config, rt, trainer, state.epoch, started)

    return train(state)
