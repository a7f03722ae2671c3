"""The epoch loop every trainer shares, run through the entry scripts under
horovodrun: with TensorFlow and MXNet, one rank on each emulated host
reaches 95% with identical weights (over MPI and over Gloo), and a resumed
run here continues; a disk that fills under rank 0's checkpoint ends every rank with
one line, and the run resumes from the checkpoint before."""

import json
import shutil

import pytest
from conftest import TRAINER, assert_trained, horovodrun, require_framework

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


@pytest.mark.cluster
def test_one_rank_per_emulated_host_ends_identical(trainer, cluster, mnist_dir, tmp_path):
    framework, script = trainer
    controller = {"tensorflow": "mpi", "mxnet": "gloo"}[framework]  # both controllers covered
    run = horovodrun(["-np", "2", "-H", "a:1,b:1", f"--{controller}"],
                     ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "2"],
                     tmp_path / "run", host="a", trainer=script)
    summary = assert_trained(run, 2, controller, {"a": 1, "b": 1})  # 95% included
    assert summary["framework"] == framework
    assert [e["epoch"] for e in run.epochs] == [1, 2]
    assert (tmp_path / "run" / "checkpoints" / "checkpoint.npz").is_file()


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


def test_a_full_disk_ends_every_rank_in_one_line_and_the_run_resumes(small_mnist_dir,
                                                                      small_disk, tmp_path):
    data = ["--data-dir", str(small_mnist_dir), "--no-download"]
    full = horovodrun(["-np", "2", "-H", "localhost:2"], [*data, "--epochs", "3"],
                      small_disk / "run", trainer=TRAINER)
    assert full.returncode == 2, full.output[-3000:]
    path = small_disk / "run" / "checkpoints" / "checkpoint.pt"
    message = f"pytorch_mnist.py: error: cannot write {path}: No space left on device (rank 0 on "
    said = [line for line in full.output.splitlines() if "error:" in line]
    assert len(said) == 2 and all(message in line for line in said), said  # every rank
    assert "Traceback" not in full.output
    # Epoch 1 is whole on the disk; epoch 2's line came before its checkpoint.
    assert [json.loads(line)["epoch"] for line in
            (small_disk / "run" / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    shutil.copytree(small_disk / "run", tmp_path / "run")  # room again
    resumed = horovodrun(["-np", "2", "-H", "localhost:2"],
                         [*data, "--epochs", "3", "--resume"], tmp_path / "run", trainer=TRAINER)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "resuming after epoch 1" in resumed.output
    assert [e["epoch"] for e in resumed.epochs] == [1, 2, 3]
    assert resumed.summary["weights_identical"]
