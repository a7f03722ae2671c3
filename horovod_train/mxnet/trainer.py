"""The MXNet training run: a Gluon network, hvd.DistributedTrainer, and the
shared epoch loop (loop.py). MXNet sizes its OpenMP pool when it is
imported, so mxnet_mnist.py sets OMP_NUM_THREADS before importing this."""

import os
import tempfile
import time
from pathlib import Path

import horovod.mxnet as hvd
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from horovod_train.core import (
    array_checkpoint,
    array_data,
    distributed,
    loop,
    metrics,
    mnist,
    runtime,
    sharding,
)
from horovod_train.core.config import RunConfig
from horovod_train.core.lr_schedule import lr_scale

MODEL_NAME = "mnist_cnn"
TRAINER_STATES = "trainer/states"


def build_model() -> nn.HybridSequential:
    """The same network as models.MnistCNN; batch-norm momentum and epsilon
    follow PyTorch's defaults. Input sizes are given, so the weights exist
    right after initialize(): a warm-up forward pass in inference mode would
    let MKLDNN reorder them in place, and Horovod's broadcast cannot read
    MKLDNN-laid-out arrays."""
    net = nn.HybridSequential(prefix=f"{MODEL_NAME}_")
    with net.name_scope():
        net.add(
            nn.Conv2D(16, 5, padding=2, use_bias=False, in_channels=1),
            nn.BatchNorm(momentum=0.9, epsilon=1e-5, in_channels=16),
            nn.Activation("relu"),
            nn.MaxPool2D(2),
            nn.Conv2D(32, 5, padding=2, use_bias=False, in_channels=16),
            nn.BatchNorm(momentum=0.9, epsilon=1e-5, in_channels=32),
            nn.Activation("relu"),
            nn.MaxPool2D(2),
            nn.Flatten(),
            nn.Dense(128, activation="relu", in_units=32 * 7 * 7),
            nn.Dropout(0.25),
            nn.Dense(10, in_units=128),
        )
    return net


class MXNetTrainer(loop.Trainer):
    """MXNet's side of the loop: a hybridized Gluon network stepped by
    hvd.DistributedTrainer, its parameters and the optimizer's state in an
    array checkpoint, the collectives of horovod.mxnet."""

    framework = "mxnet"
    model_name = MODEL_NAME

    def __init__(self, config: RunConfig, rt: runtime.Runtime, context, train: mnist.Split,
                 test: mnist.Split):
        self.config, self.rt, self.context, self.train, self.test = (config, rt, context, train,
                                                                     test)
        self.n_train, self.n_test = len(train), len(test)
        self.lr_scale = lr_scale(rt.size, False, rt.local_size, on_gpu=rt.device != "cpu")
        schedule = config.schedule
        self.batches_per_epoch = sharding.batches_per_epoch(len(train), rt.size,
                                                            schedule.batch_size)
        self.net = build_model()
        self.net.initialize(mx.init.Xavier(magnitude=2.24), ctx=context)
        self.net.hybridize(static_alloc=True)
        self.params = self.net.collect_params()
        self.trainer = hvd.DistributedTrainer(
            self.params, "sgd", {"learning_rate": schedule.lr, "momentum": schedule.momentum},
            compression=(hvd.Compression.fp16 if config.horovod.fp16_allreduce
                         else hvd.Compression.none),
            gradient_predivide_factor=config.horovod.gradient_predivide_factor)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        self.checkpoint_path = array_checkpoint.checkpoint_path(config.outputs.checkpoint_dir)

    def state_arrays(self) -> dict[str, np.ndarray]:
        arrays = {name: p.data(self.context).asnumpy() for name, p in sorted(self.params.items())}
        arrays[TRAINER_STATES] = np.frombuffer(trainer_states(self.trainer), dtype=np.uint8)
        return arrays

    def restore(self) -> int:
        """Rank 0's checkpoint, if any, into the parameters and the
        optimizer's state; the epochs it holds."""
        if not self.checkpoint_path.exists():
            return 0
        shapes = {name: tuple(p.shape) for name, p in self.params.items()}
        shapes[TRAINER_STATES] = None  # bytes of any length
        epochs_done, arrays = array_checkpoint.load(self.checkpoint_path, "mxnet", MODEL_NAME,
                                                    shapes)
        for name, value in arrays.items():
            if name != TRAINER_STATES:
                self.params[name].set_data(mx.nd.array(value, ctx=self.context))
        load_trainer_states(self.trainer, arrays[TRAINER_STATES].tobytes())
        return epochs_done

    def broadcast_from_root(self, resumed: bool) -> None:
        """Every rank starts from rank 0's weights, and the optimizer's
        state of a resumed run."""
        if resumed:
            states = hvd.broadcast_object(
                trainer_states(self.trainer) if self.rt.is_root else None, root_rank=0,
                name="trainer_states")
            load_trainer_states(self.trainer, states)
        hvd.broadcast_parameters(self.params, root_rank=0)

    def as_arrays(self, images: np.ndarray, labels: np.ndarray):
        return (mx.nd.array(images[:, np.newaxis], ctx=self.context),
                mx.nd.array(labels, ctx=self.context))

    def epoch_batches(self, epoch: int):
        return array_data.epoch_batches(self.train, self.rt.rank, self.rt.size, epoch,
                                        self.config.schedule.seed, self.config.schedule.batch_size)

    def train_batch(self, images, labels) -> loop.BatchSums:
        x, y = self.as_arrays(images, labels)
        with autograd.record():
            output = self.net(x)
            loss = self.loss_fn(output, y)
        loss.backward()
        loss_sum = agreed = loss.sum()
        # Why: the loss averaged over the ranks as the gradients are (same
        # operation and factors), queued before them so that it overlaps
        # them; read with the loss, which is read anyway. Every rank reads the
        # same value, so all stop at the same step. One rank reduces nothing
        # (nor do its gradients): its loss is the agreed one.
        if self.rt.size > 1:
            predivide = self.config.horovod.gradient_predivide_factor
            agreed = hvd.allreduce(loss_sum, average=True, name="loss",
                                   prescale_factor=1.0 / predivide, postscale_factor=predivide)
        self.trainer.step(len(labels))  # gradient of the mean loss, averaged over ranks
        loop.check_loss(float(agreed.asscalar()))
        return float(loss_sum.asscalar()), count_correct(output, y), len(labels)

    def eval_batches(self):
        return array_data.eval_batches(self.test, self.rt.rank, self.rt.size,
                                       self.config.schedule.test_batch_size)

    def eval_batch(self, images, labels) -> loop.BatchSums:
        x, y = self.as_arrays(images, labels)
        output = self.net(x)
        loss = float(self.loss_fn(output, y).sum().asscalar())
        return loss, count_correct(output, y), len(labels)

    def set_lr(self, lr: float) -> None:
        self.trainer.set_learning_rate(lr)

    def sum_across_ranks(self, values: list[float], name: str) -> list[float]:
        summed = hvd.allreduce(mx.nd.array(values, dtype="float64"), average=False, name=name)
        return summed.asnumpy().tolist()

    def allgather_object(self, obj, name: str) -> list:
        return hvd.allgather_object(obj, name=name)

    def average_buffers(self) -> None:
        for name, p in self.params.items():
            if p.grad_req == "null":  # batch-norm running statistics
                p.set_data(hvd.allreduce(p.data(self.context), average=True,
                                         name=f"buffer.{name}"))

    def save_checkpoint(self, epochs_done: int, extra: dict) -> None:
        array_checkpoint.save(self.config.outputs.checkpoint_dir, "mxnet", MODEL_NAME, epochs_done,
                              self.state_arrays(), extra)

    def digest(self) -> str:
        return distributed.digest(
            (name, p.data(self.context).asnumpy()) for name, p in sorted(self.params.items()))


def run(config: RunConfig) -> dict:
    started = time.perf_counter()
    use_gpu = not config.device.no_cuda and mx.context.num_gpus() > 0
    runtime.init_horovod(hvd, cpu_tensors=not use_gpu)
    context = mx.gpu(hvd.local_rank() % mx.context.num_gpus()) if use_gpu else mx.cpu()
    mx.random.seed(config.schedule.seed)
    np.random.seed(config.schedule.seed)
    rt = runtime.describe(hvd, f"gpu:{context.device_id}" if use_gpu else "cpu",
                              int(os.environ.get("OMP_NUM_THREADS", "0")))
    distributed.check_placement(config, rt, use_gpu)
    train, test = distributed.prepare_run(hvd, rt, config)
    trainer = MXNetTrainer(config, rt, context, train, test)
    resume = config.outputs.resume
    epochs_done = distributed.resume_on_root(hvd, rt, trainer.restore) if resume else 0
    metrics.note_checkpoint(rt, trainer.checkpoint_path, config.outputs.resume)
    trainer.broadcast_from_root(resumed=epochs_done > 0)
    return loop.fit(config, rt, trainer, epochs_done, started)


def count_correct(output, labels) -> float:
    return float((output.argmax(axis=1) == labels.astype("float32")).sum().asscalar())


def trainer_states(trainer) -> bytes:
    """The optimizer's state (momentum) as bytes; Gluon only writes it to files."""
    with tempfile.NamedTemporaryFile(suffix=".states") as f:
        trainer.save_states(f.name)
        return Path(f.name).read_bytes()


def load_trainer_states(trainer, states: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".states") as f:
        f.write(states)
        f.flush()
        trainer.load_states(f.name)
