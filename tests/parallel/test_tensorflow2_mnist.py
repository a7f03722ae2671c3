"""What only the TensorFlow entry does; the shared loop is tested in
test_train_loop.py."""

import diverged
import pytest
from conftest import horovodrun, require_framework

pytestmark = pytest.mark.slow


def test_a_diverged_resume_keeps_the_checkpoint_another_framework_refuses(small_mnist_dir,
                                                                          tmp_path):
    """A good epoch, then resumed on 2 ranks at a rate that diverges: the
    run stops at the step in one line from rank 0, exit 1, the checkpoint as
    it was. MXNet then names the mismatch of TensorFlow's checkpoint."""
    require_framework("TensorFlow")
    require_framework("MXNet")
    common = ["-np", "1", "-H", "localhost:1", "--gloo"]
    data = ["--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "1"]
    tf = horovodrun(common, data, tmp_path / "run", trainer="horovod_train/tensorflow2_mnist.py")
    assert tf.returncode == 0, tf.output[-3000:]
    earlier = diverged.earlier_outputs(tmp_path / "run")
    diverging = horovodrun(["-np", "2", "-H", "localhost:2", "--gloo"],
                           [*data, "--epochs", "2", *diverged.DIVERGING], tmp_path / "run",
                           trainer="horovod_train/tensorflow2_mnist.py")
    diverged.assert_stopped(diverging.returncode, diverging.output, "tensorflow2_mnist.py",
                            "2/2", earlier)
    mxnet = horovodrun(common, [*data, "--resume"], tmp_path / "run",
                       trainer="horovod_train/mxnet_mnist.py")
    assert mxnet.returncode != 0
    assert "holds tensorflow model 'mnist_cnn', this run trains mxnet model" in mxnet.output
