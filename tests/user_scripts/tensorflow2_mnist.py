"""A user's own TensorFlow 2 script with Horovod, in the shape of Horovod's
tensorflow2_mnist example: a custom loop with hvd.DistributedGradientTape in
a tf.function, the variables broadcast from rank 0 after the first step,
each rank's share of the digits. Written for the tests (it reads MNIST's
files from --data-dir); nothing of the platform in it. With --out, rank 0
writes what the run did there as JSON, with the HVT_ settings its launcher
handed it."""

import argparse
import json
import os
import socket
import struct
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def read_idx(path: Path) -> np.ndarray:
    data = path.read_bytes()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


parser = argparse.ArgumentParser(description="TensorFlow 2 MNIST with Horovod (a user's script)")
parser.add_argument("--data-dir", required=True)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--out", help="rank 0 writes the run's figures here (JSON)")
args = parser.parse_args()

hvd.init()
raw = Path(args.data_dir) / "MNIST" / "raw"
images = read_idx(raw / "train-images-idx3-ubyte")[hvd.rank()::hvd.size()] / 255.0
labels = read_idx(raw / "train-labels-idx1-ubyte")[hvd.rank()::hvd.size()].astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((images.astype("float32"), labels)).batch(
    args.batch_size)
tf.random.set_seed(42 + hvd.rank())  # the broadcast makes the ranks agree
model = tf.keras.Sequential([tf.keras.layers.Input((28, 28)), tf.keras.layers.Flatten(),
                             tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(10)])
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.5)


@tf.function
def training_step(batch, target):
    with tf.GradientTape() as tape:
        loss = loss_fn(target, model(batch, training=True))
    tape = hvd.DistributedGradientTape(tape)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
    return loss


losses, first = [], True
for epoch in range(1, args.epochs + 1):
    for batch, target in dataset:
        loss = training_step(batch, target)
        if first:  # the optimizer's slots exist after its first step
            hvd.broadcast_variables(model.variables, root_rank=0)
            variables = optimizer.variables
            hvd.broadcast_variables(variables() if callable(variables) else variables,
                                    root_rank=0)
            first = False
    losses.append(float(hvd.allreduce(loss, name="loss")))
    if hvd.rank() == 0:
        print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

total = tf.add_n([tf.reduce_sum(v) for v in model.trainable_variables])
checksums = hvd.allgather(tf.reshape(total, [1])).numpy()
hosts = hvd.allgather_object(socket.gethostname())
if hvd.rank() == 0 and args.out:
    with open(args.out, "w") as file:
        json.dump({"size": hvd.size(), "hosts": {h: hosts.count(h) for h in sorted(set(hosts))},
                   "losses": losses, "same_weights": bool((checksums == checksums[0]).all()),
                   "argv": sys.argv[1:], "mpi": hvd.mpi_enabled(),
                   # What the launcher handed the rank, for the test's eyes.
                   "launcher_settings": {name: value for name, value in os.environ.items()
                                         if name.startswith("HVT_")}}, file)
