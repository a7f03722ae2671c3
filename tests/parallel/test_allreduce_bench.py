"""benchmarks/allreduce_bench.py: allreduce bus bandwidth against message size
for Horovod, torch.distributed and mpi4py, run for real with two ranks
under `horovodrun --mpi` and `horovodrun --gloo` on this machine, and across
the emulated hosts over a shaped link."""

import json
import os
import subprocess

import pytest
from conftest import BIN, REPO

BENCH = "benchmarks/allreduce_bench.py"

SIZES = [4 * 1024, 256 * 1024]  # --sizes 4K,256K

IMPLEMENTATIONS = ["horovod", "torch", "mpi"]

ROW_KEYS = {"bytes", "iters", "time_s", "algbw_gbps", "busbw_gbps"}


def run(command: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def bench(*args: str) -> subprocess.CompletedProcess:
    """The benchmark as one plain process: one rank, no launcher."""
    return run([str(BIN / "python"), BENCH, *args])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("allreduce") / "allreduce.json"
    result = run([str(BIN / "horovodrun"), "--mpi", "-np", "2", "-H", "localhost:2",
                  str(BIN / "python"), BENCH, "--sizes", "4K,256K", "--iters", "3",
                  "--warmup", "1", "--json", str(out)])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result, json.loads(out.read_text())


def test_two_ranks_print_a_table_of_all_three(two_ranks):
    result, _ = two_ranks
    header = next(line for line in result.stdout.splitlines() if "busbw" in line)
    assert header.count("busbw") == 3
    assert all(name in result.stdout for name in IMPLEMENTATIONS)
    assert "4 KiB" in result.stdout and "256 KiB" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_json_has_settings_and_environment(two_ranks):
    _, record = two_ranks
    assert record["settings"]["sizes"] == SIZES
    assert record["settings"]["iters"] == 3 and record["settings"]["warmup"] == 1
    assert record["settings"]["implementations"] == IMPLEMENTATIONS
    env = record["environment"]
    assert env["world_size"] == 2
    assert len(env["hostnames"]) == 2
    assert env["horovod_controller"] == "mpi"
    assert env["torch_backend"] == "gloo"
    for package in ("torch", "horovod", "mpi4py", "mpi_library"):
        assert env["versions"][package], package


def test_each_implementation_has_one_row_per_size(two_ranks):
    _, record = two_ranks
    assert list(record["results"]) == IMPLEMENTATIONS
    for name, rows in record["results"].items():
        assert [r["bytes"] for r in rows] == SIZES, name
        assert all(set(r) >= ROW_KEYS for r in rows), name
        assert all(r["iters"] == 3 for r in rows), name  # small sizes: no cap


def test_bandwidths_follow_from_bytes_and_time(two_ranks):
    """algbw = bytes / time; busbw = algbw * 2(n-1)/n, here n = 2."""
    _, record = two_ranks
    n = record["environment"]["world_size"]
    for rows in record["results"].values():
        for r in rows:
            assert r["time_s"] > 0
            assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
            assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (n - 1) / n)


def test_summary_compares_the_largest_size(two_ranks):
    _, record = two_ranks
    summary = record["summary"]
    largest = {name: rows[-1] for name, rows in record["results"].items()}
    assert summary["bytes"] == max(SIZES)
    assert summary["busbw_gbps"] == {name: r["busbw_gbps"] for name, r in largest.items()}
    busbw = summary["busbw_gbps"]
    assert summary["ratios"]["horovod/torch"] == pytest.approx(busbw["horovod"] / busbw["torch"])
    assert summary["ratios"]["horovod/mpi"] == pytest.approx(busbw["horovod"] / busbw["mpi"])


def test_one_plain_process_is_one_rank(tmp_path):
    out = tmp_path / "one.json"
    result = bench("--sizes", "4K", "--iters", "2", "--warmup", "0",
                   "--implementations", "mpi,torch", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["environment"]["world_size"] == 1
    assert list(record["results"]) == ["torch", "mpi"]
    # One rank moves nothing over a link: busbw is 0, by the formula.
    assert all(r["busbw_gbps"] == 0 for rows in record["results"].values() for r in rows)


@pytest.mark.parametrize("sizes", ["0", "banana"])
def test_bad_sizes_fail_with_one_line(sizes):
    result = bench("--sizes", sizes)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("allreduce_bench: error: argument --sizes:")
    assert sizes in errors[0]
    assert "Traceback" not in result.stderr


def test_help_explains_busbw():
    result = bench("--help")
    assert result.returncode == 0
    assert "busbw" in result.stdout
    assert "2(n-1)/n" in result.stdout
    assert "--max-seconds" in result.stdout


def test_under_gloo_horovod_and_torch_are_measured_without_mpi(tmp_path):
    out = tmp_path / "gloo.json"
    result = run([str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                  str(BIN / "python"), BENCH, "--sizes", "4K", "--iters", "2", "--warmup", "0",
                  "--json", str(out)])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    record = json.loads(out.read_text())
    assert list(record["results"]) == ["horovod", "torch"]
    assert record["environment"]["launcher"] == "gloo"
    assert record["environment"]["horovod_controller"] == "gloo"
    assert record["environment"]["world_size"] == 2
    assert "mpi4py" not in record["environment"]["versions"]


def test_under_gloo_asking_for_mpi_is_a_one_line_error():
    result = run([str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                  str(BIN / "python"), BENCH, "--sizes", "4K", "--implementations", "mpi"],
                 timeout=120)
    assert result.returncode != 0
    errors = {line.split(">:", 1)[-1] for line in result.stderr.splitlines()
              if "allreduce_bench: error:" in line}
    assert errors == {"allreduce_bench: error: mpi: needs the MPI launcher (horovodrun --mpi, "
                      "mpirun); under horovodrun --gloo measure horovod,torch"}, result.stderr
    # horovodrun --gloo itself prints its own traceback when a rank fails;
    # none comes from the benchmark.
    assert 'allreduce_bench.py", line' not in result.stdout + result.stderr
