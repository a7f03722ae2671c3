"""scripts/launch_cluster.sh: the commands it would run on real hosts (no
Docker engine here to run them): containers with host networking, GPUs, the
keys read-only and the cluster's hosts; horovodrun from the first host with
every slot; with --rdma the hosts' RDMA devices, IPC_LOCK and no memlock
limit, checked for on every host (over a stand-in ssh) before any container
starts."""

import os
import shlex
import subprocess

import pytest
from conftest import REPO

SCRIPT = REPO / "scripts" / "launch_cluster.sh"


RDMA_FLAGS = [("--device", "/dev/infiniband"), ("--cap-add", "IPC_LOCK"),
              ("--ulimit", "memlock=-1:-1")]


def dry_run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env=env)


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
        assert "HVT_CLUSTER_HOSTS=n1 n2" in command and "HVT_SSH_PORT=12345" in command
    host, command = train
    assert host == "n1"
    # scripts/launch.sh's launch in the first container, the trainer's
    # command after it unchanged.
    assert command == ["docker", "exec", "horovod-train", "python", "-m", "horovod_train",
                       "launch", "-np", "8", "-H", "n1:4,n2:4", "-p", "12345", "python",
                       "horovod_train/pytorch_mnist.py", "--data-dir", "/data"]
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


def start_commands(*args: str) -> list[list[str]]:
    """The `docker run` commands of a dry run on hosts n1 and n2."""
    result = dry_run("--hosts", "n1:2,n2:2", "--keys", "/k", *args, "--dry-run",
                     "--", "python", "x.py")
    assert result.returncode == 0, result.stderr
    return [command for _, command in remote_commands(result.stdout)
            if command[:2] == ["docker", "run"]]


def without_rdma_flags(command: list[str]) -> list[str]:
    """The command less each RDMA flag and its value, where they appear as pairs."""
    rest, i = [], 0
    while i < len(command):
        if tuple(command[i:i + 2]) in RDMA_FLAGS:
            i += 2
        else:
            rest.append(command[i])
            i += 1
    return rest


def test_rdma_adds_the_devices_ipc_lock_and_memlock_to_every_docker_run_only():
    plain = start_commands()
    rdma = start_commands("--rdma")
    assert len(rdma) == len(plain) == 2
    for with_rdma, without in zip(rdma, plain, strict=True):
        for flag, value in RDMA_FLAGS:
            assert with_rdma.count(flag) == 1 and with_rdma[with_rdma.index(flag) + 1] == value
            # docker run's options: before the image, the last word.
            assert with_rdma.index(flag) < len(with_rdma) - 2
        assert with_rdma[-1] == "horovod-train"
        # Exactly these six words more than without --rdma.
        assert without_rdma_flags(with_rdma) == without
        assert not {flag for flag, _ in RDMA_FLAGS} & set(without)


def test_rdma_flags_are_only_in_docker_run():
    result = dry_run("--hosts", "n1:2,n2:2", "--keys", "/k", "--rdma", "--dry-run",
                     "--", "python", "x.py")
    for _, command in remote_commands(result.stdout):
        if command[:2] != ["docker", "run"]:
            assert "--device" not in command and "IPC_LOCK" not in command


def test_run_args_come_in_order_before_the_image():
    for command in start_commands("--image", "horovod-train-app",
                                  "--run-arg=--env=NCCL_DEBUG=INFO",
                                  "--run-arg=-v", "--run-arg", "/scratch:/scratch"):
        assert command[-4:] == ["--env=NCCL_DEBUG=INFO", "-v", "/scratch:/scratch",
                                "horovod-train-app"]


def test_workspace_none_mounts_no_checkout():
    for command in start_commands("--workspace", "none", "--image", "horovod-train-app"):
        mounts = [command[i + 1] for i, word in enumerate(command) if word == "-v"]
        assert mounts == ["/k:/etc/horovod/keys:ro"]
        assert not any(":/workspace" in word for word in command)
        assert command[-1] == "horovod-train-app"


FAKE_SSH = """#!/usr/bin/env bash
# Stands in for ssh: logs each call; the RDMA check fails on $NO_RDMA_HOST.
echo "$*" >> "$SSH_LOG"
if [[ "${@: -1}" == "test -d /dev/infiniband" && "${@: -2:1}" == "$NO_RDMA_HOST" ]]; then
  exit 1
fi
"""


def run_with_fake_ssh(tmp_path, no_rdma_host: str, *args: str):
    """The launch, not a dry run, on two hosts that are this machine by name
    (so the reachability check needs no ssh) with ssh on PATH a stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    log = tmp_path / "ssh.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SSH_LOG": str(log),
           "NO_RDMA_HOST": no_rdma_host}
    result = dry_run("--hosts", "localhost:1,127.0.0.1:1", "--keys", "/k", *args,
                     "--", "python", "x.py", env=env)
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_rdma_checks_every_host_before_any_container_starts(tmp_path):
    result, calls = run_with_fake_ssh(tmp_path, "127.0.0.1", "--rdma")
    assert result.returncode == 2
    assert result.stderr == ("launch_cluster: error: --rdma: host 127.0.0.1 has no "
                             "/dev/infiniband (no RDMA devices, or their drivers are not "
                             "loaded: see `ibv_devinfo` there)\n")
    assert result.stdout == ""
    assert sorted(calls) == ["-o BatchMode=yes 127.0.0.1 test -d /dev/infiniband",
                             "-o BatchMode=yes localhost test -d /dev/infiniband"]


def test_rdma_check_passes_then_the_containers_start(tmp_path):
    result, calls = run_with_fake_ssh(tmp_path, "none", "--rdma")
    assert result.returncode == 0, result.stderr
    assert all("/dev/infiniband" in call for call in calls[:2])
    assert "docker run" in calls[2] and "--cap-add IPC_LOCK" in calls[2]
    assert "docker stop" in calls[-1]


def test_without_rdma_no_host_is_checked_for_it(tmp_path):
    result, calls = run_with_fake_ssh(tmp_path, "127.0.0.1")
    assert result.returncode == 0, result.stderr
    assert not any("test -d" in call for call in calls)
    assert "docker run" in calls[0] and "IPC_LOCK" not in calls[0]


def test_preflight_runs_in_the_launch_in_the_first_container_on_its_network():
    result = dry_run("--hosts", "n1:4,n2:4", "--keys", "/srv/keys", "--gpus", "none",
                     "--preflight", "--dry-run", "--", "python",
                     "horovod_train/pytorch_mnist.py", "--no-cuda")
    assert result.returncode == 0, result.stderr
    steps = remote_commands(result.stdout)
    assert len(steps) == 5  # two starts, the launch, two stops
    assert steps[2] == ("n1", ["docker", "exec", "horovod-train", "python", "-m",
                               "horovod_train", "launch", "--preflight", "-np", "8", "-H",
                               "n1:4,n2:4", "-p", "12345", "python",
                               "horovod_train/pytorch_mnist.py", "--no-cuda"])
