"""The epoch loop shared by the TensorFlow and MXNet trainers, run through
each entry script under horovodrun: 2 ranks here reach 95%, one rank on each
emulated host ends with identical weights, and a resumed run continues."""

import pytest
from conftest import assert_trained, horovodrun, require_framework

pytestmark = pytest.mark.slow
TRAINERS = {
    "tensorflow": ("TensorFlow", "horovod_train/tensorflow2_mnist.py"),
    "mxnet": ("MXNet", "horovod_train/mxnet_mnist.py"),
}


@pytest.fixture(params=sorted(TRAINERS))
def trainer(request):
    label, script = TRAINERS[request.param]
    require_framework(label)
    return request.param, script


def test_two_ranks_reach_95_percent(trainer, mnist_dir, tmp_path):
    framework, script = trainer
    run = horovodrun(["-np", "2", "-H", "localhost:2", "--gloo"],
                     ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "3"],
                     tmp_path / "run", trainer=script)
    summary = assert_trained(run, 2, "gloo", {run.summary["ranks"][0]["host"]: 2})
    assert summary["framework"] == framework
    assert [e["epoch"] for e in run.epochs] == [1, 2, 3]
    assert (tmp_path / "run" / "checkpoints" / "checkpoint.npz").is_file()


@pytest.mark.cluster
def test_one_rank_per_emulated_host_ends_identical(trainer, cluster, mnist_dir, tmp_path):
    framework, script = trainer
    controller = {"tensorflow": "mpi", "mxnet": "gloo"}[framework]  # both controllers covered
    run = horovodrun(["-np", "2", "-H", "a:1,b:1", "-p", "12345", f"--{controller}"],
                     ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "2"],
                     tmp_path / "run", host="a", trainer=script)
    assert_trained(run, 2, controller, {"a": 1, "b": 1})


def test_resume_continues_from_the_checkpoint(trainer, small_mnist_dir, tmp_path):
    _, script = trainer
    common = ["-np", "2", "-H", "localhost:2", "--gloo"]
    data = ["--data-dir", str(small_mnist_dir), "--no-download"]
    first = horovodrun(common, [*data, "--epochs", "1"], tmp_path / "run", trainer=script)
    assert first.returncode == 0, first.output[-3000:]
    second = horovodrun(common, [*data, "--epochs", "2", "--resume"], tmp_path / "run",
                        trainer=script)
    assert second.returncode == 0, second.output[-3000:]
    assert "resuming after epoch 1" in second.output
    assert [e["epoch"] for e in second.epochs] == [1, 2]
    assert second.summary["weights_identical"]
    # Nothing left to train: rank 0's restored weights reach every rank.
    third = horovodrun(common, [*data, "--epochs", "2", "--resume"], tmp_path / "run",
                       trainer=script)
    assert third.returncode == 0, third.output[-3000:]
    assert third.summary["weights_digest"] == second.summary["weights_digest"]
    assert third.summary["test_accuracy"] == second.summary["test_accuracy"]
