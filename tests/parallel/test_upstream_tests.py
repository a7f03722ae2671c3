"""benchmarks/upstream_tests.py, the runner of Horovod's own parallel tests,
on a test directory of Horovod's shape made here (Horovod's files are not
part of the project): a real horovodrun of two ranks, each a pytest, counted
from rank 0's record."""

import json
import subprocess
import sys

import pytest
from conftest import BIN, REPO

SCRIPT = REPO / "benchmarks" / "upstream_tests.py"

SAMPLE = '''\
import os
import pytest


def test_passes_on_every_rank():
    assert os.environ["HOROVOD_RANK"] in ("0", "1")


def test_fails_with_its_message():
    assert 1 == 2, "one is not two"


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


def test_written_in_keras_3_form():
    assert "learning_rate" in dict(lr=0.1)
'''


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env={"PATH": f"{BIN}:/usr/bin:/bin"})


def test_counts_and_first_lines_come_from_rank_0s_record(tmp_path):
    (tmp_path / "test" / "parallel").mkdir(parents=True)
    (tmp_path / "test" / "parallel" / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "counts.json"
    result = run("--tests", str(tmp_path / "test"), "--files", "test_sample.py",
                 "--controllers", "gloo", "--keras-3-idioms", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"test_sample.py over gloo: 2 passed, 1 failed, 1 skipped "
        f"({json.loads(out.read_text())['runs'][0]['wall_s']} s)",
        "  test_fails_with_its_message: AssertionError: one is not two"]
    record = json.loads(out.read_text())
    assert record["keras_3_idioms"] is True and record["np"] == 2
    # The idioms changed a copy alone.
    assert "dict(lr=0.1)" in (tmp_path / "test" / "parallel" / "test_sample.py").read_text()


@pytest.mark.parametrize("args, line", [
    (["--tests", "/nonexistent"],
     "upstream_tests.py: error: --tests /nonexistent: no test_tensorflow.py, "),
    (["--tests", "TESTS", "--files", "test_sample.py", "--controllers", "nccl"],
     "upstream_tests.py: error: --controllers nccl: want gloo, mpi or gloo,mpi"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, line):
    (tmp_path / "parallel").mkdir()
    (tmp_path / "parallel" / "test_sample.py").write_text(SAMPLE)
    result = run(*[str(tmp_path) if a == "TESTS" else a for a in args])
    assert result.returncode == 2
    [said] = result.stderr.splitlines()
    assert said.startswith(line), said
