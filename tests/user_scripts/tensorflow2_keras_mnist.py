"""A user's own Keras script with Horovod, in the shape of Horovod's
tensorflow2_keras_mnist example, written in Keras 3 form: each rank's share
of the digits, hvd.DistributedOptimizer, model.fit with Horovod's broadcast
and metric-average callbacks. Written for the tests (it reads MNIST's files
from --data-dir: keras.datasets would download them); nothing of the
platform in it. With --out, rank 0 writes what the run did there as JSON,
with the HVT_ settings its launcher handed it."""

import argparse
import json
import os
import socket
import struct
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd_tf  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def read_idx(path: Path) -> np.ndarray:
    data = path.read_bytes()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


parser = argparse.ArgumentParser(description="Keras MNIST with Horovod (a user's script)")
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
keras.utils.set_random_seed(42 + hvd.rank())  # the broadcast makes the ranks agree
model = keras.Sequential([keras.layers.Input((28, 28)), keras.layers.Flatten(),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.5))
model.compile(optimizer=optimizer,
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(images.astype("float32"), labels, batch_size=args.batch_size,
                    epochs=args.epochs, verbose=2 if hvd.rank() == 0 else 0,
                    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

total = tf.add_n([tf.reduce_sum(v) for v in model.trainable_variables])
checksums = hvd_tf.allgather(tf.reshape(total, [1])).numpy()
hosts = hvd_tf.allgather_object(socket.gethostname())
if hvd.rank() == 0 and args.out:
    with open(args.out, "w") as file:
        json.dump({"size": hvd.size(), "hosts": {h: hosts.count(h) for h in sorted(set(hosts))},
                   "losses": [float(loss) for loss in history.history["loss"]],
                   "same_weights": bool((checksums == checksums[0]).all()),
                   "argv": sys.argv[1:], "mpi": hvd_tf.mpi_enabled(),
                   # What the launcher handed the rank, for the test's eyes.
                   "launcher_settings": {name: value for name, value in os.environ.items()
                                         if name.startswith("HVT_")}}, file)
