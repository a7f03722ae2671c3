"""Horovod's TensorFlow and Keras parts on Keras 3 and on tf-keras (Keras
2, with TF_USE_LEGACY_KERAS=1): the cases of horovod#4290, run on every
rank of a real horovodrun. Each rank starts from different weights; a case
prints `CASE name ok` or fails the rank with what differed. Used by
tests/parallel/test_keras.py.

    horovodrun -np 2 -H localhost:2 --gloo python tests/keras_cases.py
    TF_USE_LEGACY_KERAS=1 horovodrun -np 2 -H localhost:2 --gloo python tests/keras_cases.py
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import horovod.tensorflow.keras as hvd_keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tf_keras  # noqa: E402

    keras = tf.keras  # tf-keras, as a Keras 2 script reaches it
    KERAS_VERSION = tf_keras.__version__
else:
    import keras  # noqa: E402

    KERAS_VERSION = keras.__version__


def optimizer_variables(optimizer) -> list:
    """A method in Keras 2, a property in Keras 3."""
    variables = optimizer.variables
    return variables() if callable(variables) else variables


def model_of_rank(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.layers.Input((6,)),
        keras.layers.Dense(8, activation="relu", name="hidden"),
        keras.layers.BatchNormalization(name="norm"),
        keras.layers.Dense(3, name="out"),
    ], name="case_model")


def arrays(variables) -> list[np.ndarray]:
    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in variables]


def same_on_every_rank(variables, what: str) -> None:
    """Every rank's values equal rank 0's, to the bit."""
    mine = arrays(variables)
    root = [hvd.broadcast(tf.constant(a), root_rank=0, name=f"{what}.{i}").numpy()
            for i, a in enumerate(mine)]
    for i, (a, b) in enumerate(zip(mine, root, strict=True)):
        if not np.array_equal(a, b):
            raise AssertionError(f"{what}: variable {i} differs from rank 0's on rank "
                                 f"{hvd.rank()}")


def batch(seed: int, n: int = 16):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 6)).astype("float32"), rng.integers(0, 3, size=n))


def broadcast_model_and_optimizer() -> None:
    model = model_of_rank(100 + hvd.rank())
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    # Each rank's momentum slots hold something of its own before the broadcast.
    for v in optimizer_variables(optimizer):
        v.assign(tf.fill(v.shape, tf.cast(hvd.rank() + 1, v.dtype)))
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer_variables(optimizer), root_rank=0)
    same_on_every_rank(model.variables, "model")
    same_on_every_rank(optimizer_variables(optimizer), "optimizer")


def own_and_distributed_gradients(model, seed: int, distributed) -> tuple[list, list]:
    """The gradients of one batch of this rank's (`seed`): the rank's own,
    and those of the tape that `distributed` makes of a plain one."""
    images, labels = batch(seed + hvd.rank())
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    found = []
    for wrap in (lambda tape: tape, distributed):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        found.append([g.numpy() for g in wrap(tape).gradient(loss, model.trainable_variables)])
    return found[0], found[1]


def gradient_tape_averages() -> None:
    model = model_of_rank(7)  # the same weights on every rank

    def distributed(tape):
        tape = hvd.DistributedGradientTape(tape)
        tape.register_local_source(model.trainable_variables[0])
        return tape

    local, averaged = own_and_distributed_gradients(model, 200, distributed)
    # The local source's gradient is this rank's, scaled by 1/size; every
    # other one is the mean of the ranks'.
    np.testing.assert_allclose(averaged[0], local[0] / hvd.size(), rtol=1e-5, atol=1e-7)
    for i, (got, own) in enumerate(zip(averaged[1:], local[1:], strict=True), start=1):
        mean = hvd.allreduce(tf.constant(own), op=hvd.Average, name=f"expected.{i}").numpy()
        np.testing.assert_allclose(got, mean, rtol=1e-5, atol=1e-7)


def fit_with_callbacks() -> None:
    model = model_of_rank(300 + hvd.rank())
    lr = 0.05
    optimizer = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(lr * hvd.size(),
                                                                    momentum=0.9))
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    images, labels = batch(400 + hvd.rank(), n=64)
    history = model.fit(images, labels, batch_size=16, epochs=3, verbose=0, callbacks=[
        hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd_keras.callbacks.MetricAverageCallback(),
        hvd_keras.callbacks.LearningRateWarmupCallback(initial_lr=lr * hvd.size(),
                                                       warmup_epochs=2, verbose=0),
    ])
    # The broadcast and the averaged gradients keep the ranks in step (the
    # batch-norm statistics stay each rank's own: Horovod averages gradients).
    same_on_every_rank(model.trainable_variables, "fit model")
    same_on_every_rank(optimizer_variables(optimizer), "fit optimizer")
    # MetricAverageCallback: the logs every rank saw are the same average.
    loss = np.array(history.history["loss"])
    same_on_every_rank([loss], "fit loss")
    # The warmup reached the scaled rate.
    reached = float(np.asarray(optimizer.learning_rate))
    if not np.isclose(reached, lr * hvd.size()):
        raise AssertionError(f"the learning rate after warmup is {reached}, not "
                             f"{lr * hvd.size()}")


def sync_batch_norm_takes_every_ranks_batch() -> None:
    """One training step of hvd.SyncBatchNormalization on each rank's own
    batch: the moving statistics move toward the mean and variance of all
    ranks' inputs together, the same on every rank."""
    norm = hvd.SyncBatchNormalization(momentum=0.0, epsilon=0.0)
    images, _ = batch(500 + hvd.rank())
    norm(tf.constant(images), training=True)
    together = np.concatenate(hvd.allgather_object(images))
    np.testing.assert_allclose(np.asarray(norm.moving_mean), together.mean(axis=0),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(norm.moving_variance), together.var(axis=0),
                               rtol=1e-4, atol=1e-5)


def local_layer_kept_local(model, local_layer, local: list, got: list, what: str) -> None:
    """The local layer's gradients are the rank's own scaled by 1/size, the
    others the mean of the ranks'."""
    local_ids = {id(v) for v in local_layer.trainable_weights}
    for i, (v, g, own) in enumerate(zip(model.trainable_variables, got, local, strict=True)):
        if id(v) in local_ids:
            np.testing.assert_allclose(g, own / hvd.size(), rtol=1e-5, atol=1e-7)
        else:
            mean = hvd.allreduce(tf.constant(own), op=hvd.Average, name=f"{what}.{i}").numpy()
            np.testing.assert_allclose(g, mean, rtol=1e-5, atol=1e-7)


def partial_tape_keeps_local_layers_local() -> None:
    """PartialDistributedGradientTape: the local layer's gradients stay the
    rank's own (scaled by 1/size), the others are averaged."""
    model = model_of_rank(9)
    out_layer = model.get_layer("out")
    local, got = own_and_distributed_gradients(
        model, 600, lambda tape: hvd.PartialDistributedGradientTape(tape,
                                                                    local_layers=[out_layer]))
    local_layer_kept_local(model, out_layer, local, got, "partial-tape")


def partial_optimizer_keeps_local_layers_local() -> None:
    """horovod.keras.PartialDistributedOptimizer's compute_gradients(): as
    the partial tape, through the optimizer (Keras 3's has no
    compute_gradients of its own)."""
    import horovod.keras as hvd_standalone_keras

    model = model_of_rank(10)
    out_layer = model.get_layer("out")
    optimizer = hvd_standalone_keras.PartialDistributedOptimizer(
        keras.optimizers.SGD(0.1), local_layers=[out_layer])
    images, labels = batch(650 + hvd.rank())
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape(persistent=True) as tape:
        loss = loss_fn(labels, model(images, training=True))
    local = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    got = [g.numpy() for g, _ in optimizer.compute_gradients(loss, model.trainable_variables,
                                                             tape=tape)]
    local_layer_kept_local(model, out_layer, local, got, "partial-optimizer")


def one_weight_model() -> keras.Model:
    """y = w x, w = 0: fed x = 1, loss_of_rank gives w the gradient
    rank + 1 on every pass."""
    return keras.Sequential([keras.layers.Input((1,)),
                             keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros",
                                                name="w")])


def loss_of_rank(_, y_pred):
    """(rank + 1) y: each rank's gradient of its own."""
    return tf.reduce_sum(y_pred) * float(hvd.rank() + 1)


def aggregation_applies_every_nth_pass() -> None:
    """DistributedOptimizer(backward_passes_per_step=2) with plain SGD at
    a rate of 1: a pass of its own moves nothing and counts an iteration;
    every second one applies the ranks' mean of the two passes' sum (or of
    their mean, with average_aggregated_gradients), in a loop of one's own
    (eager) and in fit (a tf.function)."""
    passes = 2
    mean_grad = np.mean(np.arange(1, hvd.size() + 1))
    x = np.ones((1, 1), "float32")
    for average in (True, False):
        model = one_weight_model()
        optimizer = hvd_keras.DistributedOptimizer(
            keras.optimizers.SGD(1.0), backward_passes_per_step=passes,
            average_aggregated_gradients=average)
        step = mean_grad * (1 if average else passes)
        weight = model.get_layer("w").kernel
        if average:  # a loop of one's own: the optimizer's gradients, then apply them
            for n in range(1, 2 * passes + 1):
                with tf.GradientTape() as tape:
                    loss = loss_of_rank(None, model(x))
                optimizer.apply_gradients(
                    optimizer.compute_gradients(loss, model.trainable_variables, tape=tape))
                expected = -step * (n // passes)
                if not np.isclose(float(np.asarray(weight)[0, 0]), expected):
                    raise AssertionError(f"pass {n}: w {np.asarray(weight)}, not {expected}")
        else:  # fit
            model.compile(optimizer=optimizer, loss=loss_of_rank)
            model.fit(np.ones((2 * passes, 1), "float32"), np.zeros((2 * passes, 1), "float32"),
                      batch_size=1, epochs=1, shuffle=False, verbose=0)
            expected = -step * 2
            if not np.isclose(float(np.asarray(weight)[0, 0]), expected):
                raise AssertionError(f"after fit: w {np.asarray(weight)}, not {expected}")
        if int(optimizer.iterations.numpy()) != 2 * passes:
            raise AssertionError(f"{int(optimizer.iterations.numpy())} iterations counted, "
                                 f"not {2 * passes}")


def elastic_state_syncs_restores_and_commits() -> None:
    """hvd.elastic.KerasState with a plain Keras optimizer (its variables a
    property on Keras 3): sync() gives every rank rank 0's weights, optimizer
    slots and counters; restore() goes back to the last commit, commit()
    moves it."""
    model = model_of_rank(1000 + hvd.rank())
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    for v in optimizer_variables(optimizer):
        v.assign(tf.fill(v.shape, tf.cast(hvd.rank() + 1, v.dtype)))
    state = hvd_keras.elastic.KerasState(model, optimizer, batch=20 + hvd.rank(),
                                         epoch=10 + hvd.rank())
    state.sync()
    same_on_every_rank(model.variables, "synced model")
    same_on_every_rank(optimizer_variables(optimizer), "synced optimizer")
    if (state.batch, state.epoch) != (20, 10):
        raise AssertionError(f"synced counters {(state.batch, state.epoch)}, not (20, 10)")
    synced = arrays(model.variables) + arrays(optimizer_variables(optimizer))

    def scramble(value: float) -> None:
        for v in [*model.variables, *optimizer_variables(optimizer)]:
            v.assign(tf.fill(v.shape, tf.cast(value, v.dtype)))
        state.batch, state.epoch = 21, 11

    scramble(7.0)
    state.restore()
    for a, b in zip(arrays(model.variables) + arrays(optimizer_variables(optimizer)), synced,
                    strict=True):
        np.testing.assert_array_equal(a, b)
    if (state.batch, state.epoch) != (20, 10):
        raise AssertionError("restore() kept the changed counters")
    scramble(3.0)
    state.commit()
    scramble(5.0)
    state.restore()
    if not all(np.all(a == 3.0) for a in arrays(model.variables)) or \
            (state.batch, state.epoch) != (21, 11):
        raise AssertionError("restore() after commit() is not what was committed")


def broadcast_leaves_local_variables() -> None:
    """BroadcastGlobalVariablesCallback(local_variables=...): after the first
    batch every variable is rank 0's but the local one, which stays the
    rank's own (a learning rate of 0 keeps the weights where they were)."""
    model = model_of_rank(700 + hvd.rank())
    own = model.get_layer("out").kernel
    before = np.asarray(own.numpy())
    model.compile(optimizer=keras.optimizers.SGD(0.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images, labels = batch(800, n=16)
    model.fit(images, labels, batch_size=16, epochs=1, verbose=0, callbacks=[
        hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[own])])
    same_on_every_rank([v for v in model.variables if v is not own], "broadcast model")
    np.testing.assert_array_equal(np.asarray(own.numpy()), before)


def optimizer_options_keep_the_ranks_in_step() -> None:
    """DistributedOptimizer with fp16 compression, sparse_as_dense (an
    embedding's gradient is sparse) and its gradients in one group: fit
    ends with the same weights on every rank, each having started from its
    own."""
    keras.utils.set_random_seed(1300 + hvd.rank())
    model = keras.Sequential([keras.layers.Input((4,), dtype="int32"),
                              keras.layers.Embedding(50, 6, name="embedding"),
                              keras.layers.Flatten(), keras.layers.Dense(3, name="out")])
    optimizer = hvd_keras.DistributedOptimizer(
        keras.optimizers.SGD(0.1), compression=hvd.Compression.fp16, sparse_as_dense=True,
        groups=1)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hvd.broadcast_variables(model.variables, root_rank=0)
    rng = np.random.default_rng(1400 + hvd.rank())
    model.fit(rng.integers(0, 50, size=(32, 4)), rng.integers(0, 3, size=32), batch_size=16,
              epochs=1, verbose=0)
    same_on_every_rank(model.trainable_variables, "options model")


def process_sets_keep_to_their_ranks() -> None:
    """A process set of each rank alone (registered at init): an allreduce
    over it is the rank's own value, and DistributedOptimizer over it
    applies the rank's own gradient where the global one applies the mean."""
    mine = OWN_SETS[hvd.rank()]
    value = tf.constant([float(hvd.rank() + 1)])
    own = float(hvd.allreduce(value, op=hvd.Sum, process_set=mine).numpy()[0])
    total = float(hvd.allreduce(value, op=hvd.Sum).numpy()[0])
    if (own, total) != (hvd.rank() + 1, sum(range(1, hvd.size() + 1))):
        raise AssertionError(f"sums {(own, total)} over the rank's set and over all")
    x = np.ones((1, 1), "float32")
    for process_set, expected in ((mine, -(hvd.rank() + 1.0)),
                                  (hvd.global_process_set, -np.mean(np.arange(1, hvd.size() + 1)))):
        model = one_weight_model()
        model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0),
                                                               process_set=process_set),
                      loss=loss_of_rank)
        model.fit(x, np.zeros((1, 1), "float32"), batch_size=1, epochs=1, verbose=0)
        weight = float(np.asarray(model.get_layer("w").kernel)[0, 0])
        if not np.isclose(weight, expected):
            raise AssertionError(f"w {weight}, not {expected}, over process set "
                                 f"{process_set.process_set_id}")


def elastic_run_trains_from_the_synced_state() -> None:
    """hvd.elastic.run around fit with the elastic callbacks (no host comes
    or goes here): it starts from rank 0's synced weights, trains in step,
    and the state counts the epochs."""
    model = model_of_rank(1100 + hvd.rank())
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    state = hvd_keras.elastic.KerasState(model, batch=0, epoch=0)
    images, labels = batch(1200 + hvd.rank(), n=32)

    @hvd_keras.elastic.run
    def train(state):
        model.fit(images, labels, batch_size=16, epochs=2, initial_epoch=state.epoch, verbose=0,
                  callbacks=[hvd_keras.elastic.CommitStateCallback(state),
                             hvd_keras.elastic.UpdateBatchStateCallback(state),
                             hvd_keras.elastic.UpdateEpochStateCallback(state)])

    train(state)
    same_on_every_rank(model.trainable_variables, "elastic run model")
    if (state.epoch, state.batch) != (2, 0):
        raise AssertionError(f"the state counted {(state.epoch, state.batch)}, not (2, 0)")


# A process set of each rank alone, registered at init (process-sets); the
# size from the launcher, as hvd.init needs the sets before it can say it.
OWN_SETS = [hvd.ProcessSet([rank]) for rank in range(int(
    os.environ.get("HOROVOD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 1))]

CASES = {
    "broadcast": broadcast_model_and_optimizer,
    "gradient-tape": gradient_tape_averages,
    "fit": fit_with_callbacks,
    "sync-batch-norm": sync_batch_norm_takes_every_ranks_batch,
    "partial-tape": partial_tape_keeps_local_layers_local,
    "local-variables": broadcast_leaves_local_variables,
    "aggregation": aggregation_applies_every_nth_pass,
    "elastic-state": elastic_state_syncs_restores_and_commits,
    "elastic-run": elastic_run_trains_from_the_synced_state,
    "optimizer-options": optimizer_options_keep_the_ranks_in_step,
    "process-sets": process_sets_keep_to_their_ranks,
}
if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    # horovod.keras, the module that has it, is Keras 3's on TensorFlow 2.16 and later.
    CASES["partial-optimizer"] = partial_optimizer_keeps_local_layers_local


def main(names: list[str]) -> None:
    hvd.init(process_sets=OWN_SETS)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    for name in names or CASES:
        CASES[name]()
        if hvd.rank() == 0:
            print(f"CASE {name} ok (keras {KERAS_VERSION}, tensorflow {tf.__version__})",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
