"""The preflight's tier (scripts/test.sh tests/preflight), on four emulated
hosts of two slots, launched from a: ten clean runs in a row, none naming
anything; each culprit alone (a pair throttled by tc to a fifth of the
others' rate, a host key unknown, another commit, another Horovod build,
a small /dev/shm), named in its one line; launch.sh --preflight before the
two-host command, which then trains. What was seen is written to
runs/preflight/preflight.json (HVT_PREFLIGHT_RECORD names another file); a
committed copy lives in benchmarks/results/."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, REPO, on_host
from preflight_faults import (
    other_commit,
    other_horovod_build,
    slow_pair,
    small_shm,
    unknown_host_key,
)

from benchmarks.machine import machine_record

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RECORD = Path(os.environ.get("HVT_PREFLIGHT_RECORD",
                             REPO / "runs" / "preflight" / "preflight.json"))
HOSTS = "a:2,b:2,c:2,d:2"
BOUND_S = 180
SEEN: dict = {"machine": machine_record(), "hosts": HOSTS, "clean": [], "cases": {}}


def preflight(*args: str, command: str = "preflight.sh") -> subprocess.CompletedProcess:
    """On host a, with the environment's python first on PATH, as after
    activating it: the two-host command says `python`."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(on_host("a", [str(REPO / "scripts" / command), *args]),
                          capture_output=True, text=True, cwd=REPO, timeout=BOUND_S, env=env)


def culprits(result: subprocess.CompletedProcess) -> list[str]:
    return [line.removeprefix("preflight: ") for line in result.stderr.splitlines()
            if line.startswith("preflight: ") and " checked in " not in line]


def verdict_seconds(result: subprocess.CompletedProcess) -> float:
    line = next(line for line in (result.stdout + result.stderr).splitlines()
                if " checked in " in line)
    return float(line.split(" checked in ")[1].split(" s")[0])


def write_record() -> None:
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(SEEN, indent=2) + "\n")


def test_ten_clean_runs_in_a_row_name_nothing(four_host_cluster):
    for _ in range(10):
        result = preflight("-H", HOSTS, "--json")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        found = json.loads(result.stdout[:result.stdout.rindex("}") + 1])
        assert found["ok"] and not found["culprits"]
        largest = found["allreduce"]["sizes"][-1]
        SEEN["clean"].append({"seconds": found["seconds"], "phases": found["phases"],
                              "slowest_pair_gbit": found["slowest_pair_gbit"],
                              "allreduce_busbw_gbit": largest["busbw_gbps"] * 8,
                              "pair_mb_per_s": sorted(p["mb_per_s"] for p in found["pairs"])})
    write_record()


CASES = {
    "slow pair": ("pair c-d: ", "below half the median pair's"),
    "unknown host key": ("host c: ssh fails (Host key verification failed)", ""),
    "other commit": ("host b: checkout at ", "check out the same commit"),
    "other Horovod build": ("host d: another Horovod build", "install the same build"),
    "small /dev/shm": ("host c: /dev/shm is 64 MiB, below 1 GiB", ""),
}


def fault(case: str, tmp_path: Path):
    return {"slow pair": lambda: slow_pair("c", "d", "200mbit", "1gbit"),
            "unknown host key": lambda: unknown_host_key("a", "c"),
            "other commit": lambda: other_commit("b", tmp_path),
            "other Horovod build": lambda: other_horovod_build("d", tmp_path),
            "small /dev/shm": lambda: small_shm("c")}[case]()


@pytest.mark.parametrize("case", list(CASES))
def test_each_culprit_alone_is_named_in_its_line(four_host_cluster, tmp_path, case):
    with fault(case, tmp_path):
        result = preflight("-H", HOSTS)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    named = culprits(result)
    start, saying = CASES[case]
    assert len(named) == 1 and named[0].startswith(start) and saying in named[0], named
    SEEN["cases"][case] = {"exit": result.returncode, "line": f"preflight: {named[0]}",
                           "seconds": verdict_seconds(result)}
    write_record()


def test_launch_preflight_before_the_two_host_command(four_host_cluster, mnist_dir, tmp_path):
    log_dir = tmp_path / "run"
    result = preflight("--preflight", "-np", "4", "-H", "a:2,b:2", "python",
                       "horovod_train/pytorch_mnist.py", "--data-dir", str(mnist_dir),
                       "--no-download", "--epochs", "1", "--no-progress", "--log-dir",
                       str(log_dir), command="launch.sh")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "preflight: all well, 2 hosts checked in " in result.stdout
    summary = json.loads((log_dir / "summary.json").read_text())
    assert summary["size"] == 4 and summary["weights_identical"]
    SEEN["launch_preflight"] = {"preflight_seconds": verdict_seconds(result),
                                "test_accuracy": summary["test_accuracy"],
                                "wall_time_s": summary["wall_time_s"]}
    write_record()
