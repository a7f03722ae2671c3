"""Horovod 0.28.1's MNIST examples' command lines, run for real with our
trainers: every flag of tests/upstream_flags.py at once, the ranks started
by the trainer itself through horovod.run (--num-proc, --hosts,
--communication, or the TensorFlow 2 example's three words), as upstream's
do. Those that cannot run together or here:
--use-adasum (MPI only, and not with a predivide factor) in a run of its own
over MPI; --use-mixed-precision (CUDA only) refused on this CPU machine in
one line, as upstream refuses it. MXNet's flags also resume its run under
horovodrun at a rate that diverges (diverged.py)."""

import json
import subprocess

import diverged
import pytest
import upstream_flags
from conftest import BIN, REPO, horovodrun, require_framework

pytestmark = pytest.mark.slow


def run(trainer: str, argv: list[str], log_dir) -> subprocess.CompletedProcess:
    """The command as upstream's README types it: python TRAINER FLAGS, no horovodrun."""
    return subprocess.run([str(BIN / "python"), f"horovod_train/{trainer}", *argv,
                           "--no-progress", "--log-dir", str(log_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def train_losses(log_dir) -> list[float]:
    """The losses a run logged every --log-interval batches."""
    lines = (log_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["train_loss"] for line in lines if "batch" in json.loads(line)]


def with_data(flags, data_dir) -> list[upstream_flags.Flag]:
    return [f._replace(value=str(data_dir)) if f.flag == "--data-dir" else f for f in flags]


def test_pytorch_examples_command_line(small_mnist_dir, tmp_path):
    flags = with_data(upstream_flags.PYTORCH, small_mnist_dir)
    result = run("pytorch_mnist.py", upstream_flags.argv(
        flags, leave_out=("--use-adasum", "--use-mixed-precision")) + ["--no-download"],
        tmp_path / "run")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "starting 2 ranks through horovod.run (hosts localhost:2, gloo controller)" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["size"] == 2 and summary["controller"] == "gloo"
    assert summary["options"]["gradient_predivide_factor"] == 2.0
    assert summary["options"]["batch_size"] == 32 and summary["options"]["seed"] == 7
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["batch"] for line in lines[:-1]] == [10, 20]  # --log-interval 10

    # --fp16-allreduce reaches the allreduce: the same run without it logs
    # other losses (its gradients are not rounded to float16), where two runs
    # of one seed on the CPU log the same to the last bit.
    plain_flags = upstream_flags.argv(
        flags, leave_out=("--use-adasum", "--use-mixed-precision", "--fp16-allreduce"))
    plain = run("pytorch_mnist.py", plain_flags + ["--no-download"], tmp_path / "plain")
    assert plain.returncode == 0, (plain.stdout + plain.stderr)[-3000:]
    assert train_losses(tmp_path / "plain") != train_losses(tmp_path / "run")
    # --gradient-predivide-factor reaches it too. Its 2.0 cannot show in the
    # numbers (halving the gradients, then doubling the sum, is exact); 3.0,
    # through the same option, divides inexactly and logs other losses.
    thirds = plain_flags[:]
    thirds[thirds.index("--gradient-predivide-factor") + 1] = "3.0"
    third = run("pytorch_mnist.py", thirds + ["--no-download"], tmp_path / "thirds")
    assert third.returncode == 0, (third.stdout + third.stderr)[-3000:]
    assert train_losses(tmp_path / "thirds") != train_losses(tmp_path / "plain")

    adasum = run("pytorch_mnist.py", ["--num-proc", "2", "--communication", "mpi",
                                      "--use-adasum", "--epochs", "1", "--no-cuda",
                                      "--data-dir", str(small_mnist_dir), "--no-download"],
                 tmp_path / "adasum")
    assert adasum.returncode == 0, (adasum.stdout + adasum.stderr)[-3000:]
    assert json.loads((tmp_path / "adasum" / "summary.json").read_text())["controller"] == "mpi"

    mixed = run("pytorch_mnist.py", ["--num-proc", "1", "--communication", "gloo",
                                     "--use-mixed-precision", "--epochs", "1",
                                     "--data-dir", str(small_mnist_dir), "--no-download"],
                tmp_path / "mixed")
    assert mixed.returncode == 2, (mixed.stdout + mixed.stderr)[-3000:]
    assert ("pytorch_mnist.py: error: --amp fp16 needs a GPU (its loss scaling is CUDA's)"
            in mixed.stdout + mixed.stderr)


def test_mxnet_examples_command_line(small_mnist_dir, tmp_path):
    flags = with_data(upstream_flags.MXNET, small_mnist_dir)
    result = run("mxnet_mnist.py", upstream_flags.argv(flags)
                 + ["--data-dir", str(small_mnist_dir), "--no-download"], tmp_path / "run")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["size"] == 2 and summary["framework"] == "mxnet"
    assert summary["options"]["gradient_predivide_factor"] == 2.0

    # The same flags under horovodrun, resumed at a rate that diverges: the
    # run stops at the step in one line from rank 0, the checkpoint as it
    # was; float16 gradients are named among what to change.
    earlier = diverged.earlier_outputs(tmp_path / "run")
    diverging = horovodrun(["-np", "2", "-H", "localhost:2", "--gloo"], upstream_flags.argv(
        flags, leave_out=tuple(f.flag for f in upstream_flags.LAUNCH)) + [
        "--data-dir", str(small_mnist_dir), "--no-download", "--epochs", "2",
        *diverged.DIVERGING], tmp_path / "run", trainer="horovod_train/mxnet_mnist.py")
    diverged.assert_stopped(diverging.returncode, diverging.output, "mxnet_mnist.py", "2/2",
                            earlier, "Lower --lr (1e+30 in this run), lengthen --warmup-epochs "
                            "(1 in this run) or drop --fp16-allreduce (float16 gradients "
                            "overflow)")


def test_tensorflow2_examples_command_line(small_mnist_dir, tmp_path):
    """`tensorflow2_mnist.py 2 localhost:2 gloo`, with our data options after."""
    require_framework("TensorFlow")
    result = run("tensorflow2_mnist.py", upstream_flags.words(upstream_flags.TENSORFLOW2_WORDS)
                 + ["--epochs", "1", "--data-dir", str(small_mnist_dir), "--no-download"],
                 tmp_path / "run")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "starting 2 ranks through horovod.run (hosts localhost:2, gloo controller)" in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["size"] == 2 and summary["framework"] == "tensorflow"
    assert summary["controller"] == "gloo"
