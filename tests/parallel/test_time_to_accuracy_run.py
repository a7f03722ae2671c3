"""benchmarks/time_to_accuracy.py in a short mode (a low target, one epoch),
the trainer's --preset and --target-accuracy it relies on, and bad input
answered with one error line."""

import json
import subprocess

import pytest
from conftest import BIN, REPO, TRAINER

from horovod_train.torch.presets import PRESETS

SCRIPT = "benchmarks/time_to_accuracy.py"


def run_benchmark(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), SCRIPT, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_trainer_stops_at_the_first_epoch_reaching_the_target(mnist_dir, tmp_path):
    result = subprocess.run(
        [str(BIN / "python"), TRAINER, "--data-dir", str(mnist_dir), "--no-download",
         "--no-progress", "--epochs", "3", "--target-accuracy", "0.5",
         "--log-dir", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["target_accuracy"] == 0.5 and summary["target_reached_epoch"] == 1
    # One clock (the trainer's --help): the time to the target is read when
    # the epoch's accuracy is known, training time when the last epoch ends.
    assert 0 < summary["step_time_s"] < summary["time_to_target_s"] <= summary["train_time_s"]
    assert summary["train_time_s"] < summary["wall_time_s"]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1  # stopped: no second epoch
    assert "reached test accuracy 0.5 after epoch 1" in result.stdout


@pytest.mark.slow
def test_short_run_reports_the_time_to_a_low_target(t10k_dir, tmp_path):
    out = tmp_path / "tta.json"
    result = run_benchmark("--source", str(t10k_dir), "--target-accuracy", "0.9",
                           "--json", str(out), "--", "--epochs", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == "time_to_accuracy" and record["preset"] == "fast-mnist"
    assert record["reached"] is True and record["target_accuracy"] == 0.9
    assert record["data"] == {"source": t10k_dir.name, "train": 8000, "test": 2000}
    assert record["trainer_args"] == ["--epochs", "1"]
    # The user's command, two ranks under horovodrun.
    assert record["command"][:7] == ["horovodrun", "-np", "2", "-H", "localhost:2", "python",
                                     "horovod_train/pytorch_mnist.py"]
    assert record["ranks"] == 2 and "DATA_DIR" in record["command"]
    assert record["options"]["data_dir"] == "DATA_DIR"  # no temporary paths
    (run,) = record["runs"]
    assert run["target_reached_epoch"] == 1 and run["test_accuracy"] >= 0.9
    # Training only is less than the trainer's wall time, which includes its
    # start-up; the command's clock holds both, and the answer comes before exit.
    assert 0 < record["time_to_target_s"] == run["time_to_target_s"] < run["wall_time_s"]
    assert run["time_to_target_s"] < run["command_to_answer_s"] < run["command_wall_s"]
    assert record["command_to_answer_s"] == run["command_to_answer_s"]
    assert record["options"]["batch_size"] == PRESETS["fast-mnist"]["batch_size"]
    assert (f"{record['command_to_answer_s']:.1f} s from the command to 90% test accuracy, "
            f"{record['time_to_target_s']:.1f} s of it training (medians)") in result.stdout


@pytest.mark.slow
def test_a_target_missed_exits_1_and_says_so(t10k_dir, tmp_path):
    out = tmp_path / "tta.json"
    result = run_benchmark("--source", str(t10k_dir), "--target-accuracy", "1",
                           "--json", str(out), "--", "--epochs", "1")
    assert result.returncode == 1, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["reached"] is False and record["time_to_target_s"] is None
    assert record["command_to_answer_s"] is None and record["command_wall_s"] > 0
    assert record["runs"][0]["target_reached_epoch"] is None
    assert "did not reach 100% test accuracy" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--target-accuracy", "1.5"], "argument --target-accuracy: 1.5 must be <= 1"),
    (["--repeats", "0"], "argument --repeats: 0 must be >= 1"),
    (["--preset", "slow"], "argument --preset: invalid choice: 'slow'"),
])
def test_bad_options_are_one_error_line(args, message):
    result = run_benchmark(*args, timeout=60)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"time_to_accuracy.py: error: {message}")
    assert "Traceback" not in result.stderr


def test_missing_digits_are_one_error_line(tmp_path):
    result = run_benchmark("--source", str(tmp_path), timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith(f"time_to_accuracy.py: error: {tmp_path} does not hold")
    assert len(result.stderr.strip().splitlines()) == 1


def test_trainer_errors_come_back_as_one_line(t10k_dir, tmp_path):
    result = run_benchmark("--source", str(t10k_dir), "--", "--model", "resnet50", timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("time_to_accuracy.py: error: the trainer failed (exit 2): ")
    assert "--synthetic" in result.stderr and len(result.stderr.strip().splitlines()) == 1
