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
                           "--controllers", "gloo,mpi", "--floors", "--json", str(out),
                           "--", "--epochs", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == "time_to_accuracy" and record["preset"] == "fast-mnist"
    assert record["reached"] is True and record["target_accuracy"] == 0.9
    assert record["data"] == {"source": t10k_dir.name, "train": 8000, "test": 2000}
    assert record["trainer_args"] == ["--epochs", "1"]
    assert record["options"]["data_dir"] == "DATA_DIR"  # no temporary paths
    assert record["options"]["batch_size"] == PRESETS["fast-mnist"]["batch_size"]
    assert [v["controller"] for v in record["variants"]] == ["gloo", "mpi"]
    for variant in record["variants"]:
        # The user's command, two ranks under horovodrun.
        assert variant["command"][:8] == ["horovodrun", "-np", "2", "-H", "localhost:2",
                                          f"--{variant['controller']}", "python",
                                          "horovod_train/pytorch_mnist.py"]
        (run,) = variant["runs"]
        assert run["target_reached_epoch"] == 1 and run["test_accuracy"] >= 0.9
        assert run["controller"] == variant["controller"]
        # Training only is less than the trainer's wall time, which includes its
        # start-up; the command's clock holds both, and the answer comes before exit.
        assert 0 < variant["time_to_target_s"] == run["time_to_target_s"] < run["wall_time_s"]
        assert run["time_to_target_s"] < run["command_to_answer_s"] < run["command_wall_s"]
        # The three parts make up the command; the first is its phases'.
        parts = run["parts"]
        assert parts["before_first_step_s"] + parts["training_s"] + parts[
            "after_answer_s"] == pytest.approx(run["command_wall_s"])
        before = [parts[k] for k in ("launch_s", "options_s", "imports_s", "horovod_s",
                                     "data_s", "setup_s")]
        assert all(seconds > 0 for seconds in before), parts
        assert sum(before) == pytest.approx(parts["before_first_step_s"])
        assert parts["training_s"] >= run["time_to_target_s"] * 0.9
    assert set(record["floors"]) == {"import_torch", "launcher_true", "horovod_start_gloo",
                                     "horovod_start_mpi"}
    assert all(seconds > 0 for seconds in record["floors"].values())
    gloo = record["variants"][0]
    assert (f"gloo: {gloo['command_to_answer_s']:.1f} s from the command to 90% test "
            f"accuracy, {gloo['time_to_target_s']:.1f} s of it training (medians)"
            ) in result.stdout


@pytest.mark.slow
def test_a_target_missed_exits_1_and_says_so(t10k_dir, tmp_path):
    out = tmp_path / "tta.json"
    result = run_benchmark("--source", str(t10k_dir), "--target-accuracy", "1",
                           "--controllers", "gloo", "--json", str(out), "--", "--epochs", "1")
    assert result.returncode == 1, result.stderr[-3000:]
    record = json.loads(out.read_text())
    (variant,) = record["variants"]
    assert record["reached"] is False and variant["time_to_target_s"] is None
    assert variant["command_to_answer_s"] is None and variant["command_wall_s"] > 0
    assert variant["runs"][0]["target_reached_epoch"] is None
    assert "gloo: did not reach 100% test accuracy" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--target-accuracy", "1.5"], "argument --target-accuracy: 1.5 must be <= 1"),
    (["--repeats", "0"], "argument --repeats: 0 must be >= 1"),
    (["--preset", "slow"], "argument --preset: invalid choice: 'slow'"),
    (["--controllers", "nccl"], "argument --controllers: choose from gloo, mpi"),
    (["--emulate", "--np", "3"], "--emulate runs the two-host command (-np 4 -H a:2,b:2)"),
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
    # Over Gloo horovodrun exits 1; its report names the rank's 2: bad input.
    assert result.stderr.startswith("time_to_accuracy.py: error: the trainer failed (exit 1): ")
    assert "--synthetic" in result.stderr and len(result.stderr.strip().splitlines()) == 1
