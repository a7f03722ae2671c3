"""benchmarks/memory_format_speed.py in its short mode: both layouts timed in
turns, the JSON consistent with what it prints; bad input is one line."""

import json
import subprocess

from conftest import BIN, REPO

SCRIPT = "benchmarks/memory_format_speed.py"


def run_benchmark(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), SCRIPT, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_short_run_times_both_layouts_and_writes_their_ratio(tmp_path):
    out = tmp_path / "memory-format.json"
    result = run_benchmark("--models", "horovod_example", "--steps", "2", "--repeats", "2",
                           "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(out.read_text())["results"]
    assert row["model"] == "horovod_example"
    for layout in ("channels_last", "contiguous"):
        assert len(row["turns_ms"][layout]) == 2 and row["step_ms"][layout] > 0
    assert abs(row["channels_last_over_contiguous"]
               - row["step_ms"]["channels_last"] / row["step_ms"]["contiguous"]) < 1e-9
    assert f"ratio {row['channels_last_over_contiguous']:.2f}" in result.stdout


def test_an_unknown_model_is_one_line():
    result = run_benchmark("--models", "lenet")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("memory_format_speed.py: error:")
    assert "Traceback" not in result.stderr
