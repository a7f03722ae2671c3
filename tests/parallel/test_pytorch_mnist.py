"""The PyTorch trainer, run for real under horovodrun: on this machine with
Gloo and MPI, across the emulated hosts a and b with the two-host command,
and interrupted then resumed."""

import json
import os
import platform
import re
import signal
import subprocess
import time

import diverged
import pytest
from conftest import BIN, REPO, TRAINER, assert_trained, horovodrun
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

from horovod_train.torch import checkpoint

pytestmark = pytest.mark.slow

EPOCHS = ["--epochs", "3"]


def two_ranks(controller: str, mnist_dir, log_dir):
    return horovodrun(["-np", "2", "-H", "localhost:2", f"--{controller}"],
                      ["--data-dir", str(mnist_dir), "--no-download", *EPOCHS,
                       "--progress-every", "0.5"], log_dir, progress=True)


@pytest.fixture(scope="module")
def gloo_run(mnist_dir, tmp_path_factory):
    """Two ranks over Gloo, three epochs: the run the interrupted one must
    end like, and the Gloo case of the 95% test."""
    return two_ranks("gloo", mnist_dir, tmp_path_factory.mktemp("gloo") / "run")


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_two_ranks_on_this_machine_reach_95_percent(controller, mnist_dir, tmp_path, request):
    """With progress on: under horovodrun stderr is no terminal, so progress
    comes as whole lines from rank 0 (assert_trained checks the output has
    whole lines only)."""
    run = (request.getfixturevalue("gloo_run") if controller == "gloo"
           else two_ranks(controller, mnist_dir, tmp_path / "run"))
    assert_trained(run, 2, controller, {run.summary["ranks"][0]["host"]: 2})
    progress = re.findall(r"^\[[\d,]+\]<stderr>:epoch (\d)/3: \d+/63 batches, ", run.output,
                          flags=re.M)
    assert set(progress) == {"1", "2", "3"}, run.output[-3000:]
    epochs = run.epochs
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert epochs[-1]["test_accuracy"] == run.summary["test_accuracy"]
    assert (run.log_dir / "checkpoints" / "checkpoint.pt").is_file()
    assert list((run.log_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_a_run_interrupted_after_epoch_2_resumes_to_the_same_weights(mnist_dir, tmp_path,
                                                                    gloo_run):
    """The same command, stopped with Ctrl-C (SIGINT to horovodrun) once epoch
    2 is logged, then given --resume: it ends with the weights of a run
    that was never stopped (gloo_run), bit for bit."""
    common = ["-np", "2", "-H", "localhost:2", "--gloo"]
    data = ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "3"]
    assert gloo_run.returncode == 0, gloo_run.output[-3000:]

    log_dir = tmp_path / "parts"
    job = subprocess.Popen([str(BIN / "horovodrun"), *common, str(BIN / "python"), TRAINER,
                            "--log-dir", str(log_dir), "--no-progress", *data], cwd=REPO,
                           env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        metrics_log = log_dir / "metrics.jsonl"
        while not (metrics_log.exists() and len(metrics_log.read_text().splitlines()) >= 2):
            assert job.poll() is None and time.monotonic() < deadline, "no epoch 2"
            time.sleep(0.1)
        job.send_signal(signal.SIGINT)
        assert job.wait(timeout=60) != 0
    finally:
        if job.poll() is None:
            job.kill()
    # Epoch 2's line is written just before its checkpoint: the stop may
    # have come between them, and resuming from epoch 1 must give the same.
    saved = checkpoint.load(checkpoint.checkpoint_path(log_dir / "checkpoints"))["epochs_done"]
    assert saved in (1, 2)
    second = horovodrun(common, [*data, "--resume"], log_dir)
    assert second.returncode == 0, second.output[-3000:]
    assert f"resuming after epoch {saved}" in second.output
    assert second.summary["resumed_after_epoch"] == saved
    assert [e["epoch"] for e in second.epochs] == [1, 2, 3]
    # TensorBoard reads each epoch once, epoch 2 too if it was trained twice.
    events = EventAccumulator(str(log_dir / "tensorboard"))
    events.Reload()
    assert [s.step for s in events.Scalars("test_accuracy")] == [1, 2, 3]
    # Same data order, dropout draws, momentum and schedule: the same weights.
    assert second.summary["weights_digest"] == gloo_run.summary["weights_digest"]


def test_resume_without_a_checkpoint_says_so_and_one_that_does_not_fit_is_refused(
        small_mnist_dir, tmp_path):
    """--resume with no checkpoint starts from epoch 1; the run's checkpoint
    then resumed at a rate that diverges (over MPI) stops at the step in one
    line from rank 0, exit 1, the checkpoint it resumed from as it was; and
    resumed as another model, it is refused."""
    run = horovodrun(["-np", "1", "-H", "localhost:1", "--gloo"],
                     ["--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "1",
                      "--resume"], tmp_path / "run")
    assert run.returncode == 0, run.output[-3000:]
    checkpoint_file = checkpoint.checkpoint_path(tmp_path / "run" / "checkpoints")
    assert f"note: --resume found no checkpoint at {checkpoint_file}; starting from epoch 1" \
        in run.output
    assert [e["epoch"] for e in run.epochs] == [1]

    # The same command again, without --resume: a run of its own beside the first
    # in TensorBoard, and with --log-interval a line every 10 batches.
    again = horovodrun(["-np", "1", "-H", "localhost:1", "--gloo"],
                       ["--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "1",
                        "--log-interval", "10"], tmp_path / "run")
    assert again.returncode == 0, again.output[-3000:]
    (earlier,) = (tmp_path / "run" / "earlier").iterdir()
    assert f"the earlier run's records in {tmp_path / 'run'} moved to {earlier}" in again.output
    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "run"))
    runs.Reload()
    assert sorted(runs.Runs()) == [f"earlier/{earlier.name}/tensorboard", "tensorboard"]
    batches = [line for line in again.lines if "batch" in line]
    assert [b["batch"] for b in batches] == [10, 20]  # 1,600 digits, 64 a batch: 25 batches
    assert all("time_utc" in line for line in again.lines)
    assert re.search(r"^\[0\]<stdout>:epoch 1 \[10/25 batches, 40%\] loss \d\.\d{4}$",
                     again.output, re.MULTILINE), again.output[-2000:]
    assert checkpoint_file.exists()  # and the next --resume finds this one

    # That checkpoint (one rank's; a checkpoint holds no rank count) resumed by two.
    common = ["-np", "2", "-H", "localhost:2", "--gloo"]
    data = ["--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "1"]
    earlier = diverged.earlier_outputs(tmp_path / "run")
    diverging = horovodrun(["-np", "2", "-H", "localhost:2", "--mpi"],
                           [*data, "--epochs", "2", *diverged.DIVERGING], tmp_path / "run")
    diverged.assert_stopped(diverging.returncode, diverging.output, "pytorch_mnist.py", "2/2",
                            earlier)
    second = horovodrun(common, [*data, "--resume", "--model", "horovod_example"],
                        tmp_path / "run")
    assert second.returncode != 0
    assert "holds model 'mnist_cnn', this run trains 'horovod_example'" in second.output
    assert "Exit code: 2" in second.output  # the rank's: bad input


def test_horovod_options_train(mnist_dir, tmp_path):
    """fp16 compression, gradient accumulation and Adasum run and still learn."""
    run = horovodrun(["-np", "2", "-H", "localhost:2", "--gloo"],
                     ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "2",
                      "--fp16-allreduce", "--backward-passes-per-step", "2"],
                     tmp_path / "run")
    assert run.returncode == 0, run.output[-3000:]
    assert run.summary["weights_identical"] and run.summary["test_accuracy"] >= 0.9
    adasum = horovodrun(["-np", "2", "-H", "localhost:2", "--mpi"],
                        ["--data-dir", str(mnist_dir), "--no-download", "--epochs", "1",
                         "--use-adasum"], tmp_path / "adasum")
    assert adasum.returncode == 0, adasum.output[-3000:]
    assert adasum.summary["weights_identical"] and adasum.summary["test_accuracy"] >= 0.9


def run_trainer(*args: str, timeout: int = 120, env: dict | None = None,
                ) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), TRAINER, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_help_documents_every_option():
    result = run_trainer("--help")
    assert result.returncode == 0
    for option in ["--data-dir", "--no-download", "--epochs", "--batch-size", "--lr",
                   "--warmup-epochs", "--seed", "--fp16-allreduce", "--use-adasum",
                   "--backward-passes-per-step", "--sync-bn", "--log-dir", "--checkpoint-dir",
                   "--resume", "--model", "--no-cuda", "--threads", "--data-pipeline",
                   "--memory-format", "--label-smoothing"]:
        assert option in result.stdout, option
    # PyTorch's own setting of its process, and how to undo it (those of
    # every trainer: tests/single/test_options.py).
    assert "HVT_MALLOC=glibc" in result.stdout


def test_a_bad_option_fails_with_one_line_and_exit_2():
    """The entry as users run it (each rule: tests/single/test_options.py)."""
    result = run_trainer("--epochs", "3", "--frobnicate")
    assert result.returncode == 2
    assert result.stderr == "pytorch_mnist.py: error: unrecognized arguments: --frobnicate\n"


def test_missing_data_offline_is_one_line_naming_the_files(tmp_path):
    result = run_trainer("--data-dir", str(tmp_path / "none"), "--no-download",
                         "--log-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert "MNIST files missing" in errors[0] and "t10k-images-idx3-ubyte" in errors[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "summary.json").exists()


def test_adasum_with_gloo_says_it_needs_mpi(mnist_dir, tmp_path):
    run = horovodrun(["-np", "2", "-H", "localhost:2", "--gloo"],
                     ["--data-dir", str(mnist_dir), "--no-download", "--use-adasum"],
                     tmp_path / "run")
    assert run.returncode != 0
    assert "--use-adasum needs the MPI controller" in run.output
    assert "Exit code: 2" in run.output  # the rank's: bad input


def test_ctrl_c_ends_the_trainer_with_one_line_and_exit_130(small_mnist_dir, tmp_path):
    """The trainer alone (one rank, no launcher), stopped with Ctrl-C in its
    second epoch; the checkpoint of the first stays whole."""
    process = subprocess.Popen(
        [str(BIN / "python"), TRAINER, "--data-dir", str(small_mnist_dir), "--no-download",
         "--epochs", "20", "--no-progress", "--log-dir", str(tmp_path / "run")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in process.stdout:
            if line.startswith("epoch 1:"):
                break
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.splitlines()[-1] == "pytorch_mnist.py: interrupted"
    assert checkpoint.load(checkpoint.checkpoint_path(tmp_path / "run" / "checkpoints"))[
        "epochs_done"] >= 1


def test_sync_bn_on_cpu_says_it_needs_gpus(mnist_dir, tmp_path):
    result = run_trainer("--data-dir", str(mnist_dir), "--sync-bn", "--no-cuda",
                         "--log-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "--sync-bn needs GPUs" in result.stderr and "Traceback" not in result.stderr


def test_unwritable_log_dir_is_one_line(mnist_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_trainer("--data-dir", str(mnist_dir), "--log-dir", str(blocker / "run"))
    assert result.returncode == 2
    assert f"cannot create {blocker / 'run'}" in result.stderr
    assert "Traceback" not in result.stderr


def test_summary_is_valid_json_with_the_run_figures_versions_and_settings(small_mnist_dir,
                                                                          tmp_path):
    """One setting the user made, the others the rank's own."""
    env = {**os.environ, "OMPI_MCA_mpi_yield_when_idle": "0"}
    result = run_trainer("--data-dir", str(small_mnist_dir), "--epochs", "1", "--no-progress",
                         "--log-dir", str(tmp_path / "run"), timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["size"] == 1 and summary["epochs"] == 1
    for key in ("test_accuracy", "images_per_sec", "wall_time_s", "train_time_s"):
        assert summary[key] > 0, key
    import horovod
    import torch

    versions = summary["versions"]
    assert versions["python"] == platform.python_version()
    assert versions["torch"] == torch.__version__ and versions["horovod"] == horovod.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", versions["open_mpi"]), versions
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    assert versions["commit"].startswith(commit) and "cuda" not in versions
    assert summary["amp"] == "off"  # --amp auto, on the CPU
    assert summary["settings"] == {
        "OMPI_MCA_mpi_yield_when_idle": {"value": "0", "set_by": "user"},
        "HOROVOD_FUSION_THRESHOLD": {"value": "4194304", "set_by": "project"},
        "malloc": {"value": "keeps freed memory", "set_by": "project"}}
    first = result.stdout.splitlines()[0]
    assert f"torch {torch.__version__}, Horovod {horovod.__version__}, Open MPI " in first, first
    assert ", amp off;" in first, first
    assert ("set: HOROVOD_FUSION_THRESHOLD=4194304, OMPI_MCA_mpi_yield_when_idle=0 (yours), "
            "malloc=keeps freed memory") in first, first


# Two epochs on 8,000 digits end near 98.5% either way; the pipelines read
# the samples in different orders (sharding.py's permutation against the
# DistributedSampler's), which moves the result by a few tenths of a point.
PIPELINE_TOLERANCE = 0.01


def test_memory_pipeline_reaches_the_loader_pipelines_accuracy(mnist_dir, tmp_path):
    accuracy = {}
    for pipeline in ("memory", "loader"):
        result = run_trainer("--data-dir", str(mnist_dir), "--no-download", "--epochs", "2",
                             "--no-progress", "--data-pipeline", pipeline,
                             "--log-dir", str(tmp_path / pipeline), timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((tmp_path / pipeline / "summary.json").read_text())
        assert summary["options"]["data_pipeline"] == pipeline
        accuracy[pipeline] = summary["test_accuracy"]
    assert accuracy["loader"] >= 0.95, accuracy
    assert accuracy["memory"] == pytest.approx(accuracy["loader"], abs=PIPELINE_TOLERANCE), \
        accuracy
