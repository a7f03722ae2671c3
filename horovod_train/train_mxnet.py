"""The MXNet training run: a Gluon network, hvd.DistributedTrainer, and the
shared epoch loop (train_loop.py). MXNet sizes its OpenMP pool when it is
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

from horovod_train import array_checkpoint, array_data, distributed, metrics, train_loop
from horovod_train.errors import UserError
from horovod_train.lr_schedule import lr_scale
from horovod_train.options import RunConfig

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


def run(config: RunConfig) -> dict:
    started = time.perf_counter()
    use_gpu = not config.no_cuda and mx.context.num_gpus() > 0
    distributed.init_horovod(hvd, cpu_tensors=not use_gpu)
    context = mx.gpu(hvd.local_rank() % mx.context.num_gpus()) if use_gpu else mx.cpu()
    mx.random.seed(config.seed)
    np.random.seed(config.seed)
    rt = distributed.describe(hvd, f"gpu:{context.device_id}" if use_gpu else "cpu",
                              int(os.environ.get("OMP_NUM_THREADS", "0")))
    if config.use_adasum:
        raise UserError("--use-adasum: Horovod's MXNet DistributedTrainer has no Adasum "
                        "(use the PyTorch or TensorFlow trainer)")
    train, test = distributed.prepare_run(hvd, rt, config)

    net = build_model()
    net.initialize(mx.init.Xavier(magnitude=2.24), ctx=context)
    net.hybridize(static_alloc=True)
    params = net.collect_params()
    trainer = hvd.DistributedTrainer(
        params, "sgd", {"learning_rate": config.lr, "momentum": config.momentum},
        compression=hvd.Compression.fp16 if config.fp16_allreduce else hvd.Compression.none)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    path = array_checkpoint.checkpoint_path(config.checkpoint_dir)

    def state_arrays() -> dict[str, np.ndarray]:
        arrays = {name: p.data(context).asnumpy() for name, p in sorted(params.items())}
        arrays[TRAINER_STATES] = np.frombuffer(trainer_states(trainer), dtype=np.uint8)
        return arrays

    def restore() -> int:
        if not path.exists():
            return 0
        shapes = {name: tuple(p.shape) for name, p in params.items()}
        shapes[TRAINER_STATES] = None  # bytes of any length
        epochs_done, arrays = array_checkpoint.load(path, "mxnet", MODEL_NAME, shapes)
        for name, value in arrays.items():
            if name != TRAINER_STATES:
                params[name].set_data(mx.nd.array(value, ctx=context))
        load_trainer_states(trainer, arrays[TRAINER_STATES].tobytes())
        return epochs_done

    epochs_done = 0
    if config.resume:
        epochs_done = distributed.resume_on_root(hvd, rt, restore)
        if epochs_done:
            states = hvd.broadcast_object(trainer_states(trainer) if rt.is_root else None,
                                          root_rank=0, name="trainer_states")
            load_trainer_states(trainer, states)
    metrics.note_checkpoint(rt, path, config.resume)
    # Every rank starts from rank 0's weights.
    hvd.broadcast_parameters(params, root_rank=0)

    def train_batch(images: np.ndarray, labels: np.ndarray) -> train_loop.BatchSums:
        x = mx.nd.array(images[:, np.newaxis], ctx=context)
        y = mx.nd.array(labels, ctx=context)
        with autograd.record():
            output = net(x)
            loss = loss_fn(output, y)
        loss.backward()
        trainer.step(len(labels))  # gradient of the mean loss, averaged over ranks
        return float(loss.sum().asscalar()), count_correct(output, y), len(labels)

    def eval_batch(images: np.ndarray, labels: np.ndarray) -> train_loop.BatchSums:
        x = mx.nd.array(images[:, np.newaxis], ctx=context)
        y = mx.nd.array(labels, ctx=context)
        output = net(x)
        return float(loss_fn(output, y).sum().asscalar()), count_correct(output, y), len(labels)

    def average_buffers():
        for name, p in params.items():
            if p.grad_req == "null":  # batch-norm running statistics
                p.set_data(hvd.allreduce(p.data(context), average=True, name=f"buffer.{name}"))

    def sum_across_ranks(values, name):
        summed = hvd.allreduce(mx.nd.array(values, dtype="float64"), average=False, name=name)
        return summed.asnumpy().tolist()

    def save_checkpoint(epochs_done: int, extra: dict):
        array_checkpoint.save(config.checkpoint_dir, "mxnet", MODEL_NAME, epochs_done,
                              state_arrays(), extra)

    steps = train_loop.Steps(
        batches_per_epoch=array_data.batches_per_epoch(train, rt.size, config.batch_size),
        epoch_batches=lambda epoch: array_data.epoch_batches(train, rt.rank, rt.size, epoch,
                                                             config.seed, config.batch_size),
        train_batch=train_batch,
        eval_batches=lambda: array_data.eval_batches(test, rt.rank, rt.size,
                                                     config.test_batch_size),
        eval_batch=eval_batch,
        set_lr=trainer.set_learning_rate,
        sum_across_ranks=sum_across_ranks,
        average_buffers=average_buffers,
        save_checkpoint=save_checkpoint,
        digest=lambda: distributed.digest(
            (name, p.data(context).asnumpy()) for name, p in sorted(params.items())),
        allgather_object=hvd.allgather_object,
    )
    scale = lr_scale(rt.size, False, rt.local_size, on_gpu=use_gpu)
    return train_loop.fit(config, rt, steps, len(train), len(test), epochs_done, "mxnet",
                          MODEL_NAME, scale, started)


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
