"""benchmarks/timeline_summary.py on the timeline of a real two-rank run:
every gradient allreduce counted, the activities' times consistent with
each other; a file that is not a timeline is one line."""

import json
import os
import subprocess
import sys

from conftest import BIN, REPO

SCRIPT = "benchmarks/timeline_summary.py"


def run_summary(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_a_real_timeline_is_summed_per_activity(small_mnist_dir, tmp_path):
    timeline = tmp_path / "timeline.json"
    run = subprocess.run(
        [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", sys.executable,
         str(REPO / "horovod_train" / "pytorch_mnist.py"), "--benchmark-steps", "3",
         "--warmup-steps", "1", "--data-pipeline", "memory", "--data-dir", str(small_mnist_dir),
         "--no-download", "--log-dir", str(tmp_path / "run")],
        env={**os.environ, "HOROVOD_TIMELINE": str(timeline)}, capture_output=True, text=True,
        timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    out = tmp_path / "summary.json"
    result = run_summary(str(timeline), "--steps", "4", "--json", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    activities = summary["activities"]
    parameters = 10  # mnist_cnn's weights and biases, one allreduce each a step
    assert summary["allreduce_tensors"] == activities["ALLREDUCE"]["count"] >= 4 * parameters
    assert 1 <= summary["allreduce_responses"] <= summary["allreduce_tensors"]
    # The transport's reduction happens inside the operation.
    assert 0 < activities["MPI_ALLREDUCE"]["total_ms"] <= activities["ALLREDUCE"]["total_ms"]
    assert activities["ALLREDUCE"]["per_step_ms"] == activities["ALLREDUCE"]["total_ms"] / 4
    assert "fused operations" in result.stdout


def test_a_file_that_is_not_a_timeline_is_one_line(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"not": "a trace"}')
    result = run_summary(str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"timeline_summary.py: error: {path} is not a Horovod "
                                     "timeline (not a JSON list of trace events)")
