"""The TensorFlow 2 training run: Keras model, a custom step with
hvd.DistributedGradientTape, and the shared epoch loop (loop.py)."""

import socket
import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

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
from horovod_train.core.errors import UserError
from horovod_train.core.lr_schedule import lr_scale
from horovod_train.gpu import nvidia_driver, rules

MODEL_NAME = "mnist_cnn"


def build_model() -> tf.keras.Model:
    """The same network as models.MnistCNN, with named layers so checkpoint
    entries keep their names from run to run. Batch-norm momentum and epsilon
    follow PyTorch's defaults."""
    layers = tf.keras.layers
    return tf.keras.Sequential([
        layers.Input((28, 28, 1)),
        layers.Conv2D(16, 5, padding="same", use_bias=False, name="conv1"),
        layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name="bn1"),
        layers.ReLU(),
        layers.MaxPool2D(2),
        layers.Conv2D(32, 5, padding="same", use_bias=False, name="conv2"),
        layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name="bn2"),
        layers.ReLU(),
        layers.MaxPool2D(2),
        layers.Flatten(),
        layers.Dense(128, activation="relu", name="fc1"),
        layers.Dropout(0.25),
        layers.Dense(10, name="fc2"),
    ], name=MODEL_NAME)


def init(use_gpu: bool, threads: int | None, seed: int) -> runtime.Runtime:
    gpus = tf.config.list_physical_devices("GPU") if use_gpu else []
    if use_gpu:
        # The build and the GPUs agree, as the PyTorch trainer checks them
        # (gpu/rules.py), before hvd.init(): TensorFlow's GPU wheel beside a
        # CPU-only Horovod, or an NCCL one on a host without GPUs, is one line.
        problem = rules.build_problem(socket.gethostname(), hvd.nccl_built(), len(gpus),
                                      nvidia_driver.driver_cuda_version() is not None)
        if problem:
            raise UserError(problem)
    runtime.init_horovod(hvd, cpu_tensors=not gpus)
    if gpus:
        gpu = gpus[hvd.local_rank() % len(gpus)]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")
        device = "gpu:" + gpu.name.rsplit(":", 1)[-1]
    else:
        tf.config.set_visible_devices([], "GPU")
        device = "cpu"
    threads = runtime.threads_per_rank(hvd.local_size(), threads)
    # Must happen before TensorFlow runs its first operation.
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(seed)
    return runtime.describe(hvd, device, threads)


def variable_name(variable) -> str:
    """A variable's name, unique in the model: Keras 3 names a variable by
    its layer alone ("kernel") and keeps the whole name as its path
    ("mnist_cnn/conv1/kernel"); Keras 2 (tf-keras) names it whole."""
    return getattr(variable, "path", None) or variable.name


def model_arrays(model: tf.keras.Model, optimizer) -> dict[str, tf.Variable]:
    """Every variable a checkpoint holds, by a stable name."""
    named = {variable_name(v): v for v in model.weights}
    named.update({f"optimizer/{i}": v for i, v in enumerate(optimizer.variables)})
    return named


class TensorFlowTrainer(loop.Trainer):
    """TensorFlow's side of the loop: a Keras model stepped with
    hvd.DistributedGradientTape in a tf.function, its variables in an array
    checkpoint, the collectives of horovod.tensorflow."""

    framework = "tensorflow"
    model_name = MODEL_NAME

    def __init__(self, config: RunConfig, rt: runtime.Runtime, train: mnist.Split,
                 test: mnist.Split):
        self.config, self.rt, self.train, self.test = config, rt, train, test
        self.n_train, self.n_test = len(train), len(test)
        self.lr_scale = lr_scale(rt.size, config.horovod.use_adasum, rt.local_size,
                                 on_gpu=rt.device != "cpu")
        self.batches_per_epoch = sharding.batches_per_epoch(len(train), rt.size,
                                                            config.schedule.batch_size)
        self.model = build_model()
        self.optimizer = tf.keras.optimizers.SGD(learning_rate=config.schedule.lr,
                                                 momentum=config.schedule.momentum)
        self.optimizer.build(self.model.trainable_variables)  # creates the momentum slots now
        self.variables = model_arrays(self.model, self.optimizer)
        self.checkpoint_path = array_checkpoint.checkpoint_path(config.outputs.checkpoint_dir)
        self.compression = (hvd.Compression.fp16 if config.horovod.fp16_allreduce
                            else hvd.Compression.none)
        self.op = hvd.Adasum if config.horovod.use_adasum else hvd.Average
        self.loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                     reduction="sum")
        self.train_step = tf.function(self.gradient_step, reduce_retracing=True)
        self.eval_step = tf.function(self.inference_step, reduce_retracing=True)

    def restore(self) -> int:
        """Rank 0's checkpoint, if any, into the variables; the epochs it holds."""
        if not self.checkpoint_path.exists():
            return 0
        shapes = {name: tuple(v.shape) for name, v in self.variables.items()}
        epochs_done, arrays = array_checkpoint.load(self.checkpoint_path, "tensorflow",
                                                    MODEL_NAME, shapes)
        for name, value in arrays.items():
            self.variables[name].assign(value)
        return epochs_done

    def broadcast_from_root(self) -> None:
        """Every rank starts from rank 0's weights and optimizer state."""
        hvd.broadcast_variables(self.model.variables, root_rank=0)
        hvd.broadcast_variables(self.optimizer.variables, root_rank=0)

    def gradient_step(self, images, labels):
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = self.loss_fn(labels, logits)
            # The mean is what is averaged across ranks; the sum is reported.
            mean_loss = loss / tf.cast(tf.shape(labels)[0], loss.dtype)
        tape = hvd.DistributedGradientTape(
            tape, compression=self.compression, op=self.op,
            gradient_predivide_factor=self.config.horovod.gradient_predivide_factor)
        gradients = tape.gradient(mean_loss, self.model.trainable_variables)
        # Why: the loss averaged over the ranks as the gradients are (same
        # operation and factors), in the graph beside their allreduces, which
        # it overlaps; train_batch reads it with the loss it reads anyway, and
        # every rank reads the same value, so all stop at the same step. One
        # rank reduces nothing (nor do its gradients): its loss is the agreed one.
        agreed = mean_loss
        if self.rt.size > 1:
            predivide = self.config.horovod.gradient_predivide_factor  # 1 with Adasum
            agreed = hvd.allreduce(tf.reshape(mean_loss, [1]), name="loss", op=hvd.Average,
                                   prescale_factor=1.0 / predivide,
                                   postscale_factor=predivide)[0]
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables, strict=True))
        return loss, count_correct(logits, labels), agreed

    def inference_step(self, images, labels):
        logits = self.model(images, training=False)
        return self.loss_fn(labels, logits), count_correct(logits, labels)

    def epoch_batches(self, epoch: int):
        return array_data.epoch_batches(self.train, self.rt.rank, self.rt.size, epoch,
                                        self.config.schedule.seed, self.config.schedule.batch_size)

    def train_batch(self, images, labels) -> loop.BatchSums:
        loss, correct, agreed = self.train_step(*as_tensors(images, labels))
        loop.check_loss(float(agreed))
        return float(loss), float(correct), len(labels)

    def eval_batches(self):
        return array_data.eval_batches(self.test, self.rt.rank, self.rt.size,
                                       self.config.schedule.test_batch_size)

    def eval_batch(self, images, labels) -> loop.BatchSums:
        loss, correct = self.eval_step(*as_tensors(images, labels))
        return float(loss), float(correct), len(labels)

    def set_lr(self, lr: float) -> None:
        self.optimizer.learning_rate.assign(lr)

    def sum_across_ranks(self, values: list[float], name: str) -> list[float]:
        summed = hvd.allreduce(tf.constant(values, dtype=tf.float64), op=hvd.Sum, name=name)
        return summed.numpy().tolist()

    def allgather_object(self, obj, name: str) -> list:
        return hvd.allgather_object(obj, name=name)

    def average_buffers(self) -> None:
        for v in self.model.non_trainable_variables:  # batch-norm moving statistics
            v.assign(hvd.allreduce(v, op=hvd.Average, name=f"buffer.{variable_name(v)}"))

    def save_checkpoint(self, epochs_done: int, extra: dict) -> None:
        array_checkpoint.save(self.config.outputs.checkpoint_dir, "tensorflow", MODEL_NAME,
                              epochs_done, {n: v.numpy() for n, v in self.variables.items()},
                              extra)

    def digest(self) -> str:
        return distributed.digest((variable_name(v), v.numpy()) for v in self.model.weights)


def as_tensors(images: np.ndarray, labels: np.ndarray):
    return tf.constant(images[..., np.newaxis]), tf.constant(labels.astype(np.int64))


def run(config: RunConfig) -> dict:
    started = time.perf_counter()
    rt = init(use_gpu=not config.device.no_cuda, threads=config.device.threads,
              seed=config.schedule.seed)
    distributed.check_placement(config, rt, rt.device.startswith("gpu"))
    train, test = distributed.prepare_run(hvd, rt, config)
    trainer = TensorFlowTrainer(config, rt, train, test)
    resume = config.outputs.resume
    epochs_done = distributed.resume_on_root(hvd, rt, trainer.restore) if resume else 0
    metrics.note_checkpoint(rt, trainer.checkpoint_path, config.outputs.resume)
    trainer.broadcast_from_root()
    return loop.fit(config, rt, trainer, epochs_done, started)


def count_correct(logits, labels):
    return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float64))

