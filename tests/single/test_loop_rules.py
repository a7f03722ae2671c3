"""The epoch loop's own rules (loop.fit), in process and in seconds:
a small Trainer of its own, softmax regression in numpy on three clusters
of points, run at size 1. What the framework trainers add (Horovod, their
models, their checkpoints across ranks) is tested through horovodrun in
test_pytorch_mnist.py, test_train_loop.py and the elastic tests."""

import json
import math
import re
import socket
import time

import numpy as np
import pytest

from horovod_train.core import (
    array_checkpoint,
    distributed,
    errors,
    loop,
    lr_schedule,
    metrics,
    options,
    runtime,
)
from horovod_train.core.config import FrameworkOptions, RunConfig
from horovod_train.core.errors import UserError

CLASSES, FEATURES = 3, 2


def blobs(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around three centres, labelled by their centre."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=count)
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    return centres[labels] + rng.normal(scale=1.3, size=(count, FEATURES)), labels


class SoftmaxTrainer(loop.Trainer):
    """Plain SGD on softmax regression: one process is every rank, so the
    collectives are the identity, and what the loop calls is recorded."""

    framework = "numpy"
    model_name = "softmax"
    lr_scale = 1.0

    def __init__(self, config: RunConfig, batches_per_step: int = 1,
                 checkpoint_error: str | None = None, interrupt_after: int | None = None):
        self.config = config
        self.train, self.test = blobs(1, 240), blobs(2, 90)
        self.n_train, self.n_test = len(self.train[1]), len(self.test[1])
        self.batches_per_epoch = self.n_train // config.schedule.batch_size
        self.batches_per_step = batches_per_step
        self.weights = np.zeros((FEATURES + 1, CLASSES))
        self.gradient = np.zeros_like(self.weights)
        self.lr = None
        self.checkpoint_error = checkpoint_error
        self.interrupt_after = interrupt_after  # epochs, as a Ctrl-C would
        self.calls: list[tuple] = []  # (what, value) in the order the loop made them

    def restore(self) -> int:
        path = array_checkpoint.checkpoint_path(self.config.outputs.checkpoint_dir)
        epochs_done, arrays = array_checkpoint.load(path, self.framework, self.model_name,
                                                    {"weights": self.weights.shape})
        self.weights = arrays["weights"]
        return epochs_done

    def probabilities(self, points: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):  # a diverged run's infinities and nans
            logits = np.c_[points, np.ones(len(points))] @ self.weights
            exp = np.exp(logits - logits.max(axis=1, keepdims=True))
            return exp / exp.sum(axis=1, keepdims=True)

    def sums(self, points, labels) -> loop.BatchSums:
        p = self.probabilities(points)
        with np.errstate(all="ignore"):
            loss = -np.log(p[np.arange(len(labels)), labels]).sum()
        return loss, float((p.argmax(axis=1) == labels).sum()), len(labels)

    def start_epoch(self, epoch: int) -> None:
        self.calls.append(("start_epoch", epoch))

    def epoch_batches(self, epoch: int):
        order = np.random.default_rng([self.config.schedule.seed, epoch]).permutation(self.n_train)
        size = self.config.schedule.batch_size
        for start in range(0, len(order) - size + 1, size):
            rows = order[start:start + size]
            yield self.train[0][rows], self.train[1][rows]

    def train_batch(self, points, labels) -> loop.BatchSums:
        self.calls.append(("train_batch", self.lr))
        sums = self.sums(points, labels)
        loop.check_loss(sums[0])  # one rank: its loss is the average over ranks
        p = self.probabilities(points)
        p[np.arange(len(labels)), labels] -= 1
        self.gradient += np.c_[points, np.ones(len(points))].T @ p / len(labels)
        if sum(call[0] == "train_batch" for call in self.calls) % self.batches_per_step == 0:
            with np.errstate(all="ignore"):
                self.weights -= self.lr * self.gradient / self.batches_per_step
            self.gradient[:] = 0
        return sums

    def eval_batches(self):
        yield self.test

    def eval_batch(self, points, labels) -> loop.BatchSums:
        return self.sums(points, labels)

    def set_lr(self, lr: float) -> None:
        self.lr = lr

    def sum_across_ranks(self, values: list[float], name: str) -> list[float]:
        return list(values)

    def allgather_object(self, obj, name: str) -> list:
        return [obj]

    def average_buffers(self) -> None:
        pass

    def save_checkpoint(self, epochs_done: int, extra: dict) -> None:
        lines = (self.config.outputs.log_dir / metrics.METRICS_NAME).read_text().splitlines()
        self.calls.append(("checkpoint", epochs_done, json.loads(lines[-1])["epoch"]))
        if self.checkpoint_error:
            raise UserError(self.checkpoint_error)
        array_checkpoint.save(self.config.outputs.checkpoint_dir, self.framework, self.model_name,
                              epochs_done, {"weights": self.weights}, extra)

    def end_epoch(self, epoch: int) -> None:
        if epoch + 1 == self.interrupt_after:
            raise KeyboardInterrupt

    def digest(self) -> str:
        return distributed.digest([("weights", self.weights)])


RUNTIME = runtime.Runtime(rank=0, size=1, local_rank=0, local_size=1, device="cpu",
                              controller="gloo", hostname=socket.gethostname(), threads=1,
                              network=None)


def config_of(tmp_path, *argv: str) -> RunConfig:
    parser = options.base_parser("loop", "the loop's rules")
    argv = ["--log-dir", str(tmp_path / "run"), "--batch-size", "24", "--lr", "0.05",
            "--no-progress", *argv]
    return options.finish(parser, parser.parse_args(argv), FrameworkOptions("numpy"))


def fit(trainer: SoftmaxTrainer, epochs_done: int = 0) -> dict:
    trainer.config.outputs.log_dir.mkdir(parents=True, exist_ok=True)
    trainer.config.outputs.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    return loop.fit(trainer.config, RUNTIME, trainer, epochs_done, time.perf_counter())


def epoch_lines(config: RunConfig) -> list[dict]:
    return [json.loads(line)
            for line in (config.outputs.log_dir / metrics.METRICS_NAME).read_text().splitlines()]


def test_the_run_stops_after_the_first_epoch_that_reaches_the_target(tmp_path, capsys):
    # A small rate: the points are separated, but not at once.
    trainer = SoftmaxTrainer(config_of(tmp_path, "--epochs", "20", "--target-accuracy", "0.87",
                                       "--lr", "0.01"))
    summary = fit(trainer)
    lines = epoch_lines(trainer.config)
    accuracies = [line["test_accuracy"] for line in lines]
    assert 1 < len(lines) < 20, accuracies  # trained, and stopped early
    assert accuracies[-1] >= 0.87 and all(a < 0.87 for a in accuracies[:-1]), accuracies
    assert summary["target_reached_epoch"] == len(lines)
    assert summary["time_to_target_s"] > 0
    assert summary["test_accuracy"] == accuracies[-1]
    assert f"reached test accuracy 0.87 after epoch {len(lines)}" in capsys.readouterr().out
    assert json.loads((trainer.config.outputs.log_dir / "summary.json").read_text())["epochs"] == 20


def test_each_epochs_line_is_written_before_its_checkpoint(tmp_path):
    trainer = SoftmaxTrainer(config_of(tmp_path, "--epochs", "3"))
    fit(trainer)
    saved = [call[1:] for call in trainer.calls if call[0] == "checkpoint"]
    assert saved == [(1, 1), (2, 2), (3, 3)]  # (epochs done, the metrics file's last epoch)


@pytest.mark.parametrize("batches_per_step", [1, 2])
def test_the_learning_rate_follows_the_schedule_at_every_optimizer_step(tmp_path,
                                                                        batches_per_step):
    config = config_of(tmp_path, "--epochs", "3", "--warmup-epochs", "1.5")
    trainer = SoftmaxTrainer(config, batches_per_step=batches_per_step)
    fit(trainer)
    used = [call[1] for call in trainer.calls if call[0] == "train_batch"]
    steps_per_epoch = trainer.batches_per_epoch // batches_per_step
    expected = [lr_schedule.learning_rate(i // batches_per_step, steps_per_epoch, 3, 0.05, 1.0, 1.5)
                for i in range(3 * trainer.batches_per_epoch)]
    assert used == pytest.approx(expected)
    assert max(used) == pytest.approx(0.05)  # the peak, after the warm-up
    # Each epoch's line carries the rate of its last optimizer step.
    assert [line["lr"] for line in epoch_lines(config)] == pytest.approx(
        [expected[(e + 1) * trainer.batches_per_epoch - 1] for e in range(3)])


def test_a_resumed_run_goes_on_at_the_epochs_edge_as_an_uninterrupted_one(tmp_path):
    whole = SoftmaxTrainer(config_of(tmp_path / "whole", "--epochs", "4"))
    uninterrupted = fit(whole)

    first = SoftmaxTrainer(config_of(tmp_path / "parts", "--epochs", "4"), interrupt_after=2)
    with pytest.raises(KeyboardInterrupt):
        fit(first)
    second = SoftmaxTrainer(config_of(tmp_path / "parts", "--epochs", "4", "--resume"))
    epochs_done = second.restore()
    assert epochs_done == 2
    resumed = fit(second, epochs_done)
    assert [call[1] for call in second.calls if call[0] == "start_epoch"] == [2, 3]
    assert [line["epoch"] for line in epoch_lines(second.config)] == [1, 2, 3, 4]
    assert resumed["resumed_after_epoch"] == 2
    assert resumed["weights_digest"] == uninterrupted["weights_digest"]
    assert epoch_lines(second.config) == [
        {**line, "epoch_time_s": mine["epoch_time_s"], "images_per_sec": mine["images_per_sec"],
         "time_utc": mine["time_utc"]}
        for line, mine in zip(epoch_lines(whole.config), epoch_lines(second.config), strict=True)]


def test_with_every_epoch_done_the_run_only_evaluates(tmp_path):
    first = SoftmaxTrainer(config_of(tmp_path, "--epochs", "2"))
    trained = fit(first)
    again = SoftmaxTrainer(config_of(tmp_path, "--epochs", "2", "--resume"))
    summary = fit(again, again.restore())
    assert [call[0] for call in again.calls] == []  # no epoch, no batch, no checkpoint
    assert summary["test_accuracy"] == trained["test_accuracy"]
    assert summary["weights_digest"] == trained["weights_digest"]


def test_a_checkpoint_that_cannot_be_written_ends_the_run_in_one_line_naming_the_rank(tmp_path):
    trainer = SoftmaxTrainer(config_of(tmp_path, "--epochs", "3"),
                             checkpoint_error="cannot write checkpoint.npz: No space left")
    with pytest.raises(UserError) as raised:
        fit(trainer)
    assert str(raised.value) == (f"cannot write checkpoint.npz: No space left (rank 0 on "
                                 f"{socket.gethostname()})")
    assert [line["epoch"] for line in epoch_lines(trainer.config)] == [1]


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_a_loss_that_is_not_finite_is_the_stop(loss):
    with pytest.raises(loop.NonFiniteLoss) as raised:
        loop.check_loss(loss)
    assert raised.value.loss is loss or math.isnan(raised.value.loss)
    for finite in (0.0, 2.3, 1e300):
        loop.check_loss(finite)


def test_the_line_names_the_step_the_loss_the_rate_what_is_kept_and_what_to_change(tmp_path):
    config = config_of(tmp_path, "--epochs", "5", "--lr", "0.5", "--warmup-epochs", "2")
    assert loop.diverged_line(config, "loss nan", 2, "step 7/25", 1.5) == (
        "training diverged: loss nan at epoch 3/5, step 7/25 (learning rate 1.5); stopped "
        "there, the checkpoint after epoch 2 is kept as it was. Lower --lr (0.5 in this run) "
        "or lengthen --warmup-epochs (2 in this run)")
    # --lr takes inf; float16 gradients and the framework's own options are named too.
    fp16 = config_of(tmp_path, "--epochs", "5", "--lr", "inf", "--fp16-allreduce")
    assert loop.diverged_line(fp16, "test loss inf", 0, "after its last step", math.nan,
                              ["train in --amp off"]) == (
        "training diverged: test loss inf at epoch 1/5, after its last step (learning rate "
        "nan); stopped there, no checkpoint was written. Lower --lr (inf in this run), "
        "lengthen --warmup-epochs (1 in this run), drop --fp16-allreduce (float16 gradients "
        "overflow) or train in --amp off")


def test_a_diverging_run_stops_at_the_step_with_one_line_and_writes_nothing_more(tmp_path,
                                                                              capsys):
    """One good epoch, then resumed at a rate that diverges: the run stops
    at the step whose loss is not finite, as the trainers end (exit_code):
    one line, exit 1; the checkpoint, metrics and summary of the good epoch
    stay byte for byte."""
    good = SoftmaxTrainer(config_of(tmp_path, "--epochs", "1"))
    fit(good)
    outputs = good.config.outputs
    kept = {path: path.read_bytes() for path in (
        array_checkpoint.checkpoint_path(outputs.checkpoint_dir),
        outputs.log_dir / metrics.METRICS_NAME, outputs.log_dir / metrics.SUMMARY_NAME)}
    capsys.readouterr()

    diverging = SoftmaxTrainer(config_of(tmp_path, "--epochs", "3", "--resume", "--lr", "1e300"))
    assert errors.exit_code(lambda: fit(diverging, diverging.restore()), "trainer") == 1
    captured = capsys.readouterr()
    # Its first step's loss is finite; its update is not. The rate: step 2 of epoch 2's.
    rate = lr_schedule.learning_rate(11, 10, 3, 1e300, 1.0, 1.0)
    assert re.fullmatch(
        rf"trainer: error: training diverged: loss (nan|inf) at epoch 2/3, step 2/10 "
        rf"\(learning rate {re.escape(f'{rate:g}')}\); stopped there, the checkpoint after "
        r"epoch 1 is kept as it was\. Lower --lr \(1e\+300 in this run\) or lengthen "
        r"--warmup-epochs \(1 in this run\)\n", captured.err), captured.err
    assert [call for call in diverging.calls if call[0] != "train_batch"] == [
        ("start_epoch", 1)]
    assert len([call for call in diverging.calls if call[0] == "train_batch"]) == 2
    assert {path: path.read_bytes() for path in kept} == kept


class LastStepDiverges(SoftmaxTrainer):
    """A rate that blows up the weights at the last step of epoch 2 only:
    every training loss is finite, the test loss after it is not."""

    def learning_rate(self, step: int, scheduled) -> float:
        return 1e300 if step == 2 * self.batches_per_epoch - 1 else scheduled(step)


def test_a_test_loss_that_is_not_finite_stops_the_run_before_the_epochs_checkpoint(tmp_path,
                                                                                  capsys):
    trainer = LastStepDiverges(config_of(tmp_path, "--epochs", "3"))
    assert errors.exit_code(lambda: fit(trainer), "trainer") == 1
    line = capsys.readouterr().err
    assert re.fullmatch(r"trainer: error: training diverged: test loss (nan|inf) at epoch 2/3, "
                        r"after its last step \(learning rate 1e\+300\); stopped there, the "
                        r"checkpoint after epoch 1 is kept as it was\. .*\n", line), line
    assert [call[1:] for call in trainer.calls if call[0] == "checkpoint"] == [(1, 1)]
    assert [line["epoch"] for line in epoch_lines(trainer.config)] == [1]
    assert not (trainer.config.outputs.log_dir / metrics.SUMMARY_NAME).exists()


class LaggedSoftmax(SoftmaxTrainer):
    """Checks each step's loss at the next step (steps_back=1), as PyTorch
    alone on a GPU does; the rate blows the weights up at step `blow_up`."""

    def __init__(self, config: RunConfig, blow_up: int):
        super().__init__(config)
        self.blow_up, self.previous = blow_up, None

    def train_batch(self, points, labels) -> loop.BatchSums:
        if self.previous is not None:
            loop.check_loss(self.previous, steps_back=1)
        sums = self.sums(points, labels)
        self.previous = sums[0]
        p = self.probabilities(points)
        p[np.arange(len(labels)), labels] -= 1
        with np.errstate(all="ignore"):
            self.weights -= self.lr * np.c_[points, np.ones(len(points))].T @ p / len(labels)
        return sums

    def learning_rate(self, step: int, scheduled) -> float:
        return 1e300 if step == self.blow_up else scheduled(step)


@pytest.mark.parametrize("blow_up, step", [(13, "step 5/10"), (18, "step 10/10")])
def test_a_check_that_comes_a_step_late_names_the_step_and_the_epochs_last_is_caught(
        tmp_path, capsys, blow_up, step):
    """The loss of the step after the blow-up is the first that is not
    finite: named at its step, read at the next, or at the epoch's end for
    its last step (the epoch's summed loss), before the checkpoint."""
    trainer = LaggedSoftmax(config_of(tmp_path, "--epochs", "3"), blow_up)
    assert errors.exit_code(lambda: fit(trainer), "trainer") == 1
    line = capsys.readouterr().err
    assert re.fullmatch(rf"trainer: error: training diverged: loss (nan|inf) at epoch 2/3, "
                        rf"{step} \(learning rate [^)]+\); stopped there, the checkpoint "
                        r"after epoch 1 is kept as it was\. .*\n", line), line
    assert [line["epoch"] for line in epoch_lines(trainer.config)] == [1]
