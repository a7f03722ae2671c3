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

import argparse
import json
import math
import time
from pathlib import Path

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from horovod_train import (
    checkpoint,
    console,
    device_data,
    lr_schedule,
    metrics,
    mnist,
    sharding,
)
from horovod_train.errors import UserError
from horovod_train.models import build_model
from horovod_train.train_torch import average_buffers, distributed_optimizer, init, state_digest


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


def run(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    rt, device = init(use_cuda=not args.no_cuda, threads=args.threads, seed=args.seed)
    if rt.is_root:
        metrics.prepare_output_dirs(args.log_dir, args.checkpoint_dir)
    # Local only (see the module's docstring): a bad data directory ends this rank.
    train_split, test_split = mnist.load_train_test(args.data_dir, download=not args.no_download)
    train_data = device_data.DeviceMnist(train_split, device)
    test_data = device_data.DeviceMnist(test_split, device)
    model = build_model(args.model).to(device)
    optimizer = distributed_optimizer(model, args.lr, args.momentum, args.fp16_allreduce)
    events = EventLog(args.log_dir)
    n_train = len(train_data)

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0, samples_done=0)
    # Runs after a lost rank's rollback to the last commit (or after hosts
    # were added at a commit): the position training goes on from.
    state.register_reset_callbacks([lambda: events.write(
        "reset", epoch=state.epoch, samples_done=state.samples_done)])

    def lr_now() -> float:
        # The schedule counted in samples, so it does not depend on the
        # number of ranks; the peak scales with the ranks there are now.
        return lr_schedule.learning_rate(
            state.epoch * n_train + state.samples_done, n_train, args.epochs, args.lr,
            float(hvd.size()), args.warmup_epochs)

    @hvd.elastic.run
    def train(state) -> dict:
        test_metrics = {"test_loss": math.nan, "test_accuracy": math.nan}
        while state.epoch < args.epochs:
            model.train()
            order = sharding.epoch_order(n_train, state.epoch, args.seed)
            steps = 0
            while state.samples_done < n_train:
                indices = sharding.elastic_batch(order, state.samples_done, hvd.rank(),
                                                 hvd.size(), args.batch_size)
                images, labels = train_data.batch(torch.from_numpy(indices).to(device))
                for group in optimizer.param_groups:
                    group["lr"] = lr_now()
                optimizer.zero_grad()
                loss = F.cross_entropy(model(images), labels)
                loss.backward()
                optimizer.step()
                state.samples_done = min(n_train,
                                         state.samples_done + hvd.size() * args.batch_size)
                steps += 1
                if steps % args.commit_every == 0:
                    state.commit()
                    events.write("commit", epoch=state.epoch, samples_done=state.samples_done)
            average_buffers(model)
            test_metrics = evaluate(model, test_data, args.test_batch_size, device)
            if hvd.rank() == 0:
                checkpoint.save(args.checkpoint_dir, model, optimizer, args.model,
                                state.epoch + 1, extra={"metrics": test_metrics,
                                                        "world_size": hvd.size()})
                console.say(f"epoch {state.epoch + 1}/{args.epochs}: {hvd.size()} ranks, "
                            f"test accuracy {test_metrics['test_accuracy']:.4f}")
            state.epoch += 1
            state.samples_done = 0
            state.commit()
            events.write("commit", epoch=state.epoch, samples_done=0)
        return test_metrics

    training_started = time.perf_counter()  # options.TIMES_EPILOG
    test_metrics = train(state)
    train_seconds = time.perf_counter() - training_started
    digests = hvd.allgather_object(state_digest(model), name="elastic.digests")
    summary = {
        "framework": "pytorch", "model": args.model, "elastic": True, "size": hvd.size(),
        "epochs": args.epochs, **test_metrics,
        "weights_identical": len(set(digests)) == 1, "weights_digest": digests[0],
        "rank_digests": digests, "train_time_s": train_seconds,
        "wall_time_s": time.perf_counter() - started,
    }
    if hvd.rank() == 0:
        metrics.write_summary(args.log_dir, summary)
        console.say(f"elastic run done: {hvd.size()} ranks at the end, test accuracy "
                    f"{summary['test_accuracy']:.4f}")
    if not summary["weights_identical"]:
        raise UserError("ranks ended with different weights")
    return summary


@torch.no_grad()
def evaluate(model, data: device_data.DeviceMnist, batch_size: int, device) -> dict:
    """Test loss and accuracy over the ranks there are now, each a disjoint slice."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for images, labels in data.batches(sharding.eval_indices(len(data), hvd.rank(), hvd.size()),
                                       batch_size):
        output = model(images)
        sums += torch.stack([F.cross_entropy(output, labels, reduction="sum").double(),
                             (output.argmax(1) == labels).sum().double(),
                             torch.tensor(float(len(labels)), dtype=torch.float64,
                                          device=device)])
    loss_sum, correct, count = hvd.allreduce(sums.cpu(), op=hvd.Sum,
                                             name="elastic.eval").tolist()
    return {"test_loss": loss_sum / count, "test_accuracy": correct / count}
