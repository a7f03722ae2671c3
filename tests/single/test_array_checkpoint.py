"""The npz checkpoints of the TensorFlow and MXNet trainers: a round trip,
mismatches named, damage refused, no pickle."""

import numpy as np
import pytest

from horovod_train.core import array_checkpoint
from horovod_train.core.errors import UserError

ARRAYS = {"conv1/kernel:0": np.arange(12, dtype=np.float32).reshape(3, 4),
          "optimizer/0": np.array(7, dtype=np.int64)}
SHAPES = {name: a.shape for name, a in ARRAYS.items()}


def test_round_trip_keeps_names_values_and_epoch(tmp_path):
    array_checkpoint.save(tmp_path, "tensorflow", "mnist_cnn", 4, ARRAYS, {"note": 1})
    epochs, arrays = array_checkpoint.load(tmp_path / "checkpoint.npz", "tensorflow",
                                           "mnist_cnn", SHAPES)
    assert epochs == 4
    assert list(arrays) == list(ARRAYS)
    assert all(np.array_equal(arrays[n], ARRAYS[n]) for n in ARRAYS)


def test_other_framework_or_model_is_named(tmp_path):
    array_checkpoint.save(tmp_path, "mxnet", "mnist_cnn", 1, ARRAYS, {})
    with pytest.raises(UserError, match="holds mxnet model 'mnist_cnn', this run trains "
                                        "tensorflow model 'mnist_cnn'"):
        array_checkpoint.load(tmp_path / "checkpoint.npz", "tensorflow", "mnist_cnn", SHAPES)


def test_shape_mismatch_is_named(tmp_path):
    array_checkpoint.save(tmp_path, "tensorflow", "mnist_cnn", 1, ARRAYS, {})
    shapes = {**SHAPES, "conv1/kernel:0": (4, 3), "bn/gamma:0": (3,)}
    with pytest.raises(UserError, match=r"missing bn/gamma:0, conv1/kernel:0 is \(3, 4\) not "
                                        r"\(4, 3\)"):
        array_checkpoint.load(tmp_path / "checkpoint.npz", "tensorflow", "mnist_cnn", shapes)


@pytest.mark.parametrize("content", [b"", b"junk" * 50])
def test_damaged_file_is_refused(tmp_path, content):
    (tmp_path / "checkpoint.npz").write_bytes(content)
    with pytest.raises(UserError, match="not a readable checkpoint"):
        array_checkpoint.load(tmp_path / "checkpoint.npz", "tensorflow", "mnist_cnn", SHAPES)


def test_pickled_arrays_are_not_loaded(tmp_path):
    np.savez(tmp_path / "checkpoint.npz", header=np.array([{"x": 1}], dtype=object))
    with pytest.raises(UserError, match="not a readable checkpoint"):
        array_checkpoint.load(tmp_path / "checkpoint.npz", "tensorflow", "mnist_cnn", SHAPES)


def test_a_full_disk_keeps_the_last_checkpoint_loadable(small_disk):
    big = {"weights": np.ones(2_000_000 // 4, dtype=np.float32)}  # 2 MB: two do not fit
    array_checkpoint.save(small_disk, "mxnet", "mnist_cnn", 1, big, {})
    with pytest.raises(UserError) as err:
        array_checkpoint.save(small_disk, "mxnet", "mnist_cnn", 2, big, {})
    assert str(err.value) == (f"cannot write {small_disk / 'checkpoint.npz'}: "
                              "No space left on device")
    epochs, _ = array_checkpoint.load(small_disk / "checkpoint.npz", "mxnet", "mnist_cnn",
                                      {"weights": big["weights"].shape})
    assert epochs == 1
