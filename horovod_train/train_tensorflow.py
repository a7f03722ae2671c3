"""The TensorFlow 2 training run: Keras model, a custom step with
hvd.DistributedGradientTape, and the shared epoch loop (train_loop.py)."""

import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from horovod_train import array_checkpoint, array_data, distributed, metrics, train_loop
from horovod_train.lr_schedule import lr_scale
from horovod_train.options import RunConfig

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


def init(use_gpu: bool, threads: int | None, seed: int) -> distributed.Runtime:
    gpus = tf.config.list_physical_devices("GPU")
    distributed.init_horovod(hvd, cpu_tensors=not (use_gpu and gpus))
    if use_gpu and gpus:
        gpu = gpus[hvd.local_rank() % len(gpus)]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")
        device = "gpu:" + gpu.name.rsplit(":", 1)[-1]
    else:
        tf.config.set_visible_devices([], "GPU")
        device = "cpu"
    threads = distributed.threads_per_rank(hvd.local_size(), threads)
    # Must happen before TensorFlow runs its first operation.
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(seed)
    return distributed.describe(hvd, device, threads)


def model_arrays(model: tf.keras.Model, optimizer) -> dict[str, tf.Variable]:
    """Every variable a checkpoint holds, by a stable name."""
    named = {v.name: v for v in model.weights}
    named.update({f"optimizer/{i}": v for i, v in enumerate(optimizer.variables)})
    return named


def run(config: RunConfig) -> dict:
    started = time.perf_counter()
    rt = init(use_gpu=not config.no_cuda, threads=config.threads, seed=config.seed)
    distributed.check_controller(config.use_adasum, rt.controller, "tensorflow")
    train, test = distributed.prepare_run(hvd, rt, config)

    model = build_model()
    optimizer = tf.keras.optimizers.SGD(learning_rate=config.lr, momentum=config.momentum)
    optimizer.build(model.trainable_variables)  # creates the momentum slots now
    compression = hvd.Compression.fp16 if config.fp16_allreduce else hvd.Compression.none
    op = hvd.Adasum if config.use_adasum else hvd.Average
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                            reduction="sum")
    variables = model_arrays(model, optimizer)
    path = array_checkpoint.checkpoint_path(config.checkpoint_dir)

    def restore() -> int:
        if not path.exists():
            return 0
        shapes = {name: tuple(v.shape) for name, v in variables.items()}
        epochs_done, arrays = array_checkpoint.load(path, "tensorflow", MODEL_NAME, shapes)
        for name, value in arrays.items():
            variables[name].assign(value)
        return epochs_done

    epochs_done = 0
    if config.resume:
        epochs_done = distributed.resume_on_root(hvd, rt, restore)
    metrics.note_checkpoint(rt, path, config.resume)
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer.variables, root_rank=0)

    @tf.function(reduce_retracing=True)
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = loss_fn(labels, logits)
            # The mean is what is averaged across ranks; the sum is reported.
            mean_loss = loss / tf.cast(tf.shape(labels)[0], loss.dtype)
        tape = hvd.DistributedGradientTape(tape, compression=compression, op=op)
        gradients = tape.gradient(mean_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss, count_correct(logits, labels)

    @tf.function(reduce_retracing=True)
    def eval_step(images, labels):
        logits = model(images, training=False)
        return loss_fn(labels, logits), count_correct(logits, labels)

    def as_batch(images: np.ndarray, labels: np.ndarray):
        return tf.constant(images[..., np.newaxis]), tf.constant(labels.astype(np.int64))

    def batch_runner(step):
        def run_batch(images, labels):
            loss, correct = step(*as_batch(images, labels))
            return float(loss), float(correct), len(labels)
        return run_batch

    def average_buffers():
        for v in model.non_trainable_variables:  # batch-norm moving statistics
            v.assign(hvd.allreduce(v, op=hvd.Average, name=f"buffer.{v.name}"))

    def sum_across_ranks(values, name):
        summed = hvd.allreduce(tf.constant(values, dtype=tf.float64), op=hvd.Sum, name=name)
        return summed.numpy().tolist()

    def save_checkpoint(epochs_done: int, extra: dict):
        array_checkpoint.save(config.checkpoint_dir, "tensorflow", MODEL_NAME, epochs_done,
                              {n: v.numpy() for n, v in variables.items()}, extra)

    steps = train_loop.Steps(
        batches_per_epoch=array_data.batches_per_epoch(train, rt.size, config.batch_size),
        epoch_batches=lambda epoch: array_data.epoch_batches(train, rt.rank, rt.size, epoch,
                                                             config.seed, config.batch_size),
        train_batch=batch_runner(train_step),
        eval_batches=lambda: array_data.eval_batches(test, rt.rank, rt.size,
                                                     config.test_batch_size),
        eval_batch=batch_runner(eval_step),
        set_lr=optimizer.learning_rate.assign,
        sum_across_ranks=sum_across_ranks,
        average_buffers=average_buffers,
        save_checkpoint=save_checkpoint,
        digest=lambda: distributed.digest((v.name, v.numpy()) for v in model.weights),
        allgather_object=hvd.allgather_object,
    )
    scale = lr_scale(rt.size, config.use_adasum, rt.local_size, on_gpu=rt.device != "cpu")
    return train_loop.fit(config, rt, steps, len(train), len(test), epochs_done, "tensorflow",
                          MODEL_NAME, scale, started)


def count_correct(logits, labels):
    return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.float64))

