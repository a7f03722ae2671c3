"""What only the MXNet entry does; the shared loop is tested in
test_train_loop.py."""

import pytest
from conftest import horovodrun, require_framework

pytestmark = pytest.mark.slow


def test_adasum_is_refused_in_one_line(mnist_dir, tmp_path):
    require_framework("MXNet")
    run = horovodrun(["-np", "1", "-H", "localhost:1", "--mpi"],
                     ["--data-dir", str(mnist_dir), "--use-adasum"], tmp_path / "run",
                     trainer="horovod_train/mxnet_mnist.py")
    assert run.returncode != 0
    assert "--use-adasum: Horovod's MXNet DistributedTrainer has no Adasum" in run.output
