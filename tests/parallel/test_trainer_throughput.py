"""benchmarks/trainer_throughput.py in its short mode: both sides measured in
turns, the JSON record consistent with what it prints, and bad input
answered with one error line."""

import json
import subprocess

import pytest
from conftest import BIN, REPO

SCRIPT = "benchmarks/trainer_throughput.py"
SHORT = ["--steps", "4", "--repeats", "2", "--warmup-steps", "1"]


def run_benchmark(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), SCRIPT, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_short_run_writes_both_figures_and_their_ratio(tmp_path):
    out = tmp_path / "results" / "throughput.json"
    result = run_benchmark(*SHORT, "--samples", "2000", "--batch-size", "32", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == "trainer_throughput"
    assert record["data"] == "generated" and record["data_dir"] is None
    assert record["samples"] == 2000 and record["batch_size"] == 32
    assert record["model"] == "horovod_example" and record["device"] == "cpu"
    assert record["steps"] == 4 and record["repeats"] == 2 and record["ranks"] == 1
    assert record["order"] == ["ours", "reference"]
    for side in ("ours", "reference"):
        figures = record[side]
        assert len(figures["turns"]) == 2 and all(rate > 0 for rate in figures["turns"])
        assert figures["images_per_sec"] == pytest.approx(sum(figures["turns"]) / 2)  # median
        assert 0 < figures["last_loss"] < 10  # both really trained
    assert record["ours"]["pipeline"] == "memory"
    assert record["ratio"] == pytest.approx(
        record["ours"]["images_per_sec"] / record["reference"]["images_per_sec"])
    assert record["meets_target"] == (record["ratio"] >= record["target_ratio"] == 1.5)
    assert record["peak_rss_mib"] > 100  # torch alone is more than that
    assert record["threads"] >= 1 and record["versions"]["torch"]
    assert f"ratio {record['ratio']:.2f}" in result.stdout
    assert f"{record['ours']['images_per_sec']:.1f} images/s" in result.stdout
    assert f"{record['reference']['images_per_sec']:.1f} images/s" in result.stdout
    assert f"peak RSS {record['peak_rss_mib']:.0f} MiB" in result.stdout
    assert not list(out.parent.glob(".*.tmp"))  # written atomically, nothing left behind


def test_short_run_on_the_real_digits(mnist_dir, tmp_path):
    out = tmp_path / "throughput.json"
    result = run_benchmark(*SHORT, "--data-dir", str(mnist_dir), "--samples", "1000",
                           "--model", "mnist_cnn", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["data"] == "mnist" and record["data_dir"] == str(mnist_dir)
    assert record["samples"] == 1000 and record["model"] == "mnist_cnn"
    assert "mnist data from" in result.stdout


def test_a_bad_option_is_one_error_line():
    """The command as users run it (each rule: tests/single/test_bench_options.py)."""
    result = run_benchmark("--samples", "10", "--batch-size", "64")
    assert result.returncode == 2
    assert result.stderr == ("trainer_throughput.py: error: --samples 10 is fewer than one "
                             "batch of 64\n")


def test_missing_digits_are_one_error_line(tmp_path):
    result = run_benchmark(*SHORT, "--data-dir", str(tmp_path / "none"))
    assert result.returncode == 2
    assert result.stderr.startswith("trainer_throughput.py: error: MNIST files missing")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_unwritable_json_path_is_one_error_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_benchmark(*SHORT, "--samples", "500", "--json", str(blocker / "out.json"))
    assert result.returncode == 2
    assert result.stderr == (f"trainer_throughput.py: error: cannot create {blocker}: "
                             f"{blocker} is not a directory\n")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
