"""The preflight on four emulated hosts (scripts/preflight.sh, launched
from a): a clean cluster passes with nothing named; a sick one, before a
launch (scripts/launch.sh --preflight), has each of its culprits named in
its line and no rank started; a host whose key is unknown is named. Each
case alone, the ten clean runs in a row and the preflight before the
two-host command and an sbatch job: the tier tests/preflight."""

import json
import subprocess

import pytest
from conftest import REPO, on_host
from preflight_faults import (
    other_commit,
    other_horovod_build,
    slow_pair,
    small_shm,
    unknown_host_key,
)

pytestmark = [pytest.mark.cluster]

PREFLIGHT = str(REPO / "scripts" / "preflight.sh")
LAUNCH = str(REPO / "scripts" / "launch.sh")
BOUND_S = 180  # every check's timeout together, with room for a busy machine


def preflight(*args: str, command: str = PREFLIGHT) -> subprocess.CompletedProcess:
    return subprocess.run(on_host("a", [command, *args]), capture_output=True, text=True,
                          cwd=REPO, timeout=BOUND_S)


def culprits(result: subprocess.CompletedProcess) -> list[str]:
    return [line.removeprefix("preflight: ") for line in result.stderr.splitlines()
            if line.startswith("preflight: ") and " checked in " not in line]


def test_a_clean_cluster_passes_with_nothing_named(four_host_cluster):
    """Its allreduce left out: the suite runs it in the preflight of the
    code image (horovodrun over ssh, test_image_cluster.py) and of a Slurm
    job (srun's tasks, test_slurm.py); the tier, on these hosts."""
    result = preflight("-H", "a:1,b:1,c:1,d:1", "--json", "--no-allreduce")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    found = json.loads(result.stdout[:result.stdout.rindex("}") + 1])
    assert found["ok"] and found["culprits"] == []
    assert {(pair["from"], pair["to"]) for pair in found["pairs"]} == {
        (x, y) for x in "abcd" for y in "abcd" if x != y}
    assert all(pair["mb_per_s"] > 0 and pair["lost"] == 0 for pair in found["pairs"])
    assert set(found["clocks"]) == set("abcd") and found["allreduce"] is None
    assert found["network"].startswith("10.")
    assert len({host["facts"]["checkout"]["commit"] for host in found["hosts"].values()}) == 1
    print(f"clean: {found['seconds']} s {found['phases']}")


def test_a_sick_cluster_is_named_before_the_launch_starts_a_rank(four_host_cluster, tmp_path):
    """A slow pair (a fifth of the others' rate), another commit, a small
    /dev/shm and another Horovod build, at once: each in its line."""
    with (slow_pair("c", "d", "200mbit", "1gbit"), other_commit("b", tmp_path) as parent,
          small_shm("c"), other_horovod_build("d", tmp_path)):
        result = preflight("--preflight", "-np", "4", "-H", "a:1,b:1,c:1,d:1", "python", "-c",
                           "print('a rank started')", command=LAUNCH)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "a rank started" not in result.stdout
    named = culprits(result)
    assert any(line.startswith(f"host b: checkout at {parent[:12]}") for line in named), named
    assert any(line.startswith("host c: /dev/shm is 64 MiB") for line in named), named
    assert any(line.startswith("host d: another Horovod build") for line in named), named
    assert any(line.startswith("pair c-d: ") and "below half the median" in line
               for line in named), named
    assert len(named) == 4, named


def test_a_host_whose_key_is_unknown_is_named(four_host_cluster):
    with unknown_host_key("a", "c"):
        result = preflight("-H", "a:1,b:1,c:1", "--no-allreduce")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert culprits(result) == ["host c: ssh fails (Host key verification failed): its host key "
                                "is not known here: add it to ~/.ssh/known_hosts (ssh-keyscan c, "
                                "checked)"]
