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


def test_a_command_is_run_as_it_is_with_this_environments_python(tmp_path):
    settings = matrix.parse_args(["--hosts", "n1", "--command", "python bench.py --batch-size 8"])
    assert settings.launchers == ("horovod",)
    horovodrun = matrix.horovod_command(settings, ["n1"], 2, tmp_path)[0]
    assert horovodrun[1:5] == ["-np", "2", "-H", "n1:2"]
    assert horovodrun[-4:] == [matrix.sys.executable, "bench.py", "--batch-size", "8"]
    other = matrix.parse_args(["--command", "/opt/py/bin/python3 -u b.py"])
    assert matrix.horovod_command(other, ["n1"], 1, tmp_path)[0][-3:] == [
        "/opt/py/bin/python3", "-u", "b.py"]


def test_a_commands_figure_is_its_last_matching_line(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("[1,0]<stdout>:Img/sec per GPU: 101.0 +-2.0\n"
                   "[1,0]<stdout>:Total img/sec on 4 GPU(s): 404.5 +-8.0\n"
                   "[1,0]<stdout>:Total img/sec on 4 GPU(s): 410.0 +-8.0\n")
    assert matrix.command_throughput(log, matrix.HOROVOD_BENCHMARK_LINE) == 410.0
    assert matrix.command_throughput(log, r"per GPU: ([\d.]+)") == 101.0
    log.write_text("epoch 1: loss 0.3\n")
    with pytest.raises(matrix.RunFailed, match="its output has no line matching"):
        matrix.command_throughput(log, matrix.HOROVOD_BENCHMARK_LINE)


@pytest.mark.parametrize("argv, message", [
    (["--command", "python b.py", "--launchers", "horovod,ddp"],
     "--command runs under horovodrun: --launchers horovod"),
    (["--command", "python b.py", "--model", "resnet18"], "--model shapes the trainer's runs"),
    (["--command", "python b.py", "--steps", "5"], "--steps shapes the trainer's runs"),
    (["--command", "python b.py", "--throughput-pattern", "img/sec"],
     "--throughput-pattern 'img/sec' has no group: put the figure in (...)"),
    (["--command", "python b.py", "--throughput-pattern", "(["], "--throughput-pattern '(['"),
    (["--command", "python 'b.py"], "--command: No closing quotation"),
    (["--command", ""], "--command is empty"),
    (["--throughput-pattern", "x (\\d+)"], "--throughput-pattern reads --command's output"),
])
def test_a_commands_clashes_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        matrix.parse_args(argv)
    assert refused.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]
