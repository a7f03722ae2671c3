"""scripts/launch_cluster.sh: the commands it would run on real hosts (no
Docker engine here to run them): containers with host networking, GPUs, the
keys read-only and the cluster's hosts; horovodrun from the first host with
every slot."""

import shlex
import subprocess

import pytest
from conftest import REPO

SCRIPT = REPO / "scripts" / "launch_cluster.sh"


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def remote_commands(output: str) -> list[tuple[str, list[str]]]:
    """(host, command) for each printed `ssh -o BatchMode=yes HOST 'CMD'` line."""
    steps = []
    for line in output.splitlines():
        ssh = shlex.split(line)
        assert ssh[:3] == ["ssh", "-o", "BatchMode=yes"]
        steps.append((ssh[3], shlex.split(ssh[4])))
    return steps


def test_starts_one_container_per_host_then_trains_from_the_first():
    result = dry_run("--hosts", "n1:4,n2:4", "--keys", "/srv/keys", "--data", "/srv/mnist",
                     "--dry-run", "--", "python", "horovod_train/pytorch_mnist.py",
                     "--data-dir", "/data")
    assert result.returncode == 0, result.stderr
    steps = remote_commands(result.stdout)
    starts, train, stops = steps[:2], steps[2], steps[3:]
    assert [host for host, _ in starts] == ["n1", "n2"]
    for _, command in starts:
        assert command[:2] == ["docker", "run"]
        assert {"--network", "host"} <= set(command) and "--gpus" in command
        assert "/srv/keys:/etc/horovod/keys:ro" in command
        assert f"{REPO}:/workspace" in command  # the code: this checkout, same path
        assert "CLUSTER_HOSTS=n1 n2" in command and "SSH_PORT=12345" in command
    host, command = train
    assert host == "n1"
    assert command[command.index("horovodrun"):command.index("python")] == [
        "horovodrun", "-np", "8", "-H", "n1:4,n2:4", "-p", "12345"]
    assert [host for host, _ in stops] == ["n1", "n2"]


def test_cpu_hosts_and_keep_leave_out_gpus_and_stops():
    result = dry_run("--hosts", "a:2,b:2", "--keys", "/k", "--gpus", "none", "--keep",
                     "--dry-run", "--", "python", "x.py")
    steps = remote_commands(result.stdout)
    assert len(steps) == 3
    assert all("--gpus" not in command for _, command in steps)


@pytest.mark.parametrize("args, message", [
    (["--hosts", "n1:0", "--keys", "/k", "--", "x"],
     "--hosts n1:0: host n1 has 0 slots; each host needs at least 1"),
    (["--hosts", "n1:2,n1:2", "--keys", "/k", "--", "x"],
     "--hosts n1:2,n1:2: names host n1 more than once"),
    (["--hosts", "n1 2", "--keys", "/k", "--", "x"], "'n1 2' is not HOST:SLOTS"),
    (["--hosts", "n1:2", "--keys", "/k"], "give the trainer command after --"),
    # Not a dry run: every host is checked before any container starts.
    (["--hosts", "no-such-host.invalid:2", "--keys", "/k", "--", "x"],
     "host no-such-host.invalid does not resolve"),
])
def test_bad_input_is_one_line(args, message):
    result = dry_run(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("launch_cluster: error: ")
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
