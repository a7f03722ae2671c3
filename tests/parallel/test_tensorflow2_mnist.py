"""What only the TensorFlow entry does; the shared loop is tested in
test_train_loop.py."""

import pytest
from conftest import horovodrun, require_framework

pytestmark = pytest.mark.slow


def test_checkpoint_of_another_framework_is_refused(small_mnist_dir, tmp_path):
    """An MXNet checkpoint in the directory: TensorFlow names the mismatch."""
    require_framework("TensorFlow")
    require_framework("MXNet")
    common = ["-np", "1", "-H", "localhost:1", "--gloo"]
    data = ["--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "1"]
    mxnet = horovodrun(common, data, tmp_path / "run", trainer="horovod_train/mxnet_mnist.py")
    assert mxnet.returncode == 0, mxnet.output[-3000:]
    tf = horovodrun(common, [*data, "--resume"], tmp_path / "run",
                    trainer="horovod_train/tensorflow2_mnist.py")
    assert tf.returncode != 0
    assert "holds mxnet model 'mnist_cnn', this run trains tensorflow model" in tf.output
