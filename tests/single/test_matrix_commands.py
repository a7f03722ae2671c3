"""benchmarks/run_matrix.sh reaches hosts as every tool of the project does
(docs/clusters.md#the-ssh-port): no -p unless --ssh-port is given, so that
ssh's own configuration decides (sshd on 22 on bare hosts); given, the same
-p for horovodrun, torchrun's ssh and the hosts' check. The matrix on hosts
whose sshd is on 22, without flags: tests/cluster/test_matrix.py."""

import subprocess

import pytest

from benchmarks import matrix

HOSTS = ["n1", "n2"]


@pytest.mark.parametrize("argv, port", [([], []), (["--ssh-port", "2222"], ["-p", "2222"])],
                         ids=["not given", "given"])
def test_the_ssh_port_goes_to_every_command_only_when_given(argv, port, tmp_path, monkeypatch):
    settings = matrix.parse_args(["--hosts", ",".join(HOSTS), *argv])

    horovodrun = matrix.horovod_command(settings, HOSTS, 2, tmp_path)[0]
    assert horovodrun[1:5 + len(port)] == ["-np", "4", "-H", "n1:2,n2:2", *port]
    assert horovodrun.count("-p") == len(port) // 2

    ddp = matrix.ddp_commands(settings, HOSTS, 2, tmp_path, 29400)
    for host, command in zip(HOSTS, ddp, strict=True):
        ssh, remote = command[:-1], command[-1]
        assert ssh == ["ssh", *port, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host]
        assert "torch.distributed.run" in remote

    checked = []

    def run(command, **_):
        checked.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    matrix.check_reachable(settings.cluster, HOSTS)
    assert checked[0][1:] == ["-m", "horovod_train.launch.hosts", *port, *HOSTS]
