"""benchmarks/horovod_settings.py in its short mode: each variant run under
horovodrun in turns, with its own settings; bad input is one line."""

import json
import subprocess

from conftest import BIN, REPO

SCRIPT = "benchmarks/horovod_settings.py"


def run_benchmark(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), SCRIPT, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_short_run_compares_the_variants_with_the_first(small_mnist_dir, tmp_path):
    out = tmp_path / "settings.json"
    result = run_benchmark("--variants", "spin,gloo", "--data-dir", str(small_mnist_dir),
                           "--steps", "3", "--warmup-steps", "1", "--repeats", "1",
                           "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert [run["variant"] for run in record["runs"]] == ["spin", "gloo"]
    spin, gloo = record["runs"]
    assert spin["environment"] == {"OMPI_MCA_mpi_yield_when_idle": "0"}
    assert spin["controller"] == "mpi" and gloo["controller"] == "gloo"
    rows = {row["variant"]: row for row in record["rows"]}
    assert rows["spin"]["ratio_to_first"] == 1.0
    assert rows["gloo"]["ratio_to_first"] == gloo["images_per_sec"] / spin["images_per_sec"]
    assert f"{rows['gloo']['ratio_to_first']:.2f} of spin" in result.stdout


def test_an_unknown_variant_is_one_line():
    result = run_benchmark("--variants", "spin,turbo")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("horovod_settings.py: error:")
    assert "Traceback" not in result.stderr
