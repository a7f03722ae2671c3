"""scripts/launch.sh: horovodrun with its input checked first.

Each bad input of a launch ends within seconds, before any process starts,
with one line `launch: error: ...` naming the problem, and exit 2; good input
runs horovodrun with the same arguments. Bad input the trainer finds (data,
directories, checkpoint) ends every rank with the trainer's one line and no
outputs. Real horovodrun, ssh, sshd and sockets, on loopback only: 127.0.0.2
and 127.0.0.3 are this machine's loopback but remote to horovodrun, and names
under .invalid never resolve. Across the emulated hosts:
tests/cluster/test_launch_hosts.py."""

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BIN, REPO, TRAINER, marker_command
from entry_faults import (
    BAD_PORT_RANGE,
    BAD_TRAINER_OPTION,
    UNKNOWN_HOST,
    UNKNOWN_HOST_KEY,
)

from horovod_train.core import mnist
from horovod_train.torch import checkpoint
from horovod_train.torch.models import build_model

LAUNCH = REPO / "scripts" / "launch.sh"
ENV = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}


def launch(*argv: str, timeout: int = 120,
           env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([str(LAUNCH), *argv], cwd=REPO, env=env or ENV, capture_output=True,
                            text=True, timeout=timeout)
    return result, time.monotonic() - started


# --- loopback services standing in for a remote host's SSH port ---------------

def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


class Listener:
    """A TCP service on a loopback address that is not sshd: it answers
    with an HTTP status line, or accepts and says nothing."""

    def __init__(self, address: str, port: int, reply: bytes | None):
        self.server = socket.create_server((address, port))
        self.port = self.server.getsockname()[1]
        self.reply, self.held, self.open = reply, [], True
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while self.open:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if self.reply:
                conn.sendall(self.reply)
                conn.close()
            else:
                self.held.append(conn)  # silent: keep it open, send nothing

    def close(self):
        self.open = False
        self.server.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def http_port():
    listener = Listener("127.0.0.2", 0, b"HTTP/1.0 400 Bad Request\r\n\r\n")
    yield listener.port
    listener.close()


@pytest.fixture
def silent_port():
    """The same port silent on 127.0.0.2 and on 127.0.0.3."""
    port = free_port("127.0.0.2")
    listeners = [Listener(address, port, None) for address in ("127.0.0.2", "127.0.0.3")]
    yield port
    for listener in listeners:
        listener.close()


@pytest.fixture
def sshd_port(tmp_path):
    """A real sshd on 127.0.0.2 that knows no key of ours (and that our ssh
    does not know either)."""
    if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
        pytest.skip("a second sshd needs root and /usr/sbin/sshd")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "authorized_keys").write_text("")
    port = free_port("127.0.0.2")
    sshd = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null", "-p", str(port), "-h", str(key),
         "-o", "ListenAddress=127.0.0.2", "-o", f"AuthorizedKeysFile={tmp_path}/authorized_keys",
         "-o", "PidFile=none", "-o", "PasswordAuthentication=no",
         "-o", "KbdInteractiveAuthentication=no", "-o", "UsePAM=no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.2", port), timeout=1) as conn:
                    if conn.recv(4) == b"SSH-":
                        break
            except OSError:
                if time.monotonic() > deadline or sshd.poll() is not None:
                    pytest.fail("the test's sshd did not start")
                time.sleep(0.1)
        yield port
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


# --- the launch-side specification ---------------------------------------------

# (case, horovodrun options, what the one line must say, seconds allowed)
LAUNCH_CASES = [
    ("-H item without slots", ["-np", "1", "-H", "localhost:x"],
     "-H localhost:x: 'localhost:x' is not HOST:SLOTS", 10),
    ("-H item with two colons", ["-np", "1", "-H", "localhost:1:2"],
     "'localhost:1:2' is not HOST:SLOTS", 10),
    ("-H with an empty item", ["-np", "1", "-H", "localhost:1,,b:1"],
     "'' is not HOST:SLOTS", 10),
    ("hostfile line misspelling slots=", ["-np", "1", "-hostfile", "{hostfile_bad_line}"],
     "hostfile {hostfile_bad_line}:3: cannot read 'localhost slot=2': want HOST, "
     "HOST slots=N or HOST slots=N max_slots=M, # starting a comment", 10),
    ("hostfile of comments only", ["-np", "1", "-hostfile", "{hostfile_no_hosts}"],
     "hostfile {hostfile_no_hosts} lists no hosts", 10),
    ("hostfile missing", ["-np", "1", "-hostfile", "{tmp}/no-such-hostfile"],
     "hostfile {tmp}/no-such-hostfile: No such file or directory", 10),
    ("zero slots in -H", ["-np", "1", "-H", "localhost:0"],
     "-H localhost:0: host localhost has 0 slots; each host needs at least 1", 10),
    ("negative slots in -H", ["-np", "1", "-H", "localhost:-1"],
     "host localhost has -1 slots; each host needs at least 1", 10),
    ("zero slots in a hostfile", ["-np", "1", "-hostfile", "{hostfile_zero_slots}"],
     "hostfile {hostfile_zero_slots}:1: host localhost has 0 slots", 10),
    ("a host named twice", ["-np", "2", "-H", "localhost:1,localhost:1"],
     "names host localhost more than once", 10),
    ("more processes than slots", ["-np", "4", "-H", "localhost:2"],
     "-np 4 is more than the 2 slots of -H localhost:2", 10),
    ("more processes than a hostfile's slots", ["-np", "3", "-hostfile", "{hostfile_good}"],
     "-np 3 is more than the 2 slots of hostfile {hostfile_good}", 10),
    ("zero processes", ["-np", "0", "-H", "localhost:2"],
     "-np 0: the number of processes must be at least 1", 10),
    ("-np not a number", ["-np", "two"],
     "argument -np/--num-proc: invalid int value: 'two'", 10),
    ("-H and -hostfile both", ["-np", "1", "-H", "localhost:1", "-hostfile", "{hostfile_good}"],
     "argument -hostfile/--hostfile: not allowed with argument -H/--hosts", 10),
    ("unknown host", ["-np", "1", "-H", "no-such-host.invalid:1"],
     "host no-such-host.invalid does not resolve", 30),
    ("unreachable host", ["-np", "1", "-H", "127.0.0.2:1", "-p", "1"],
     "cannot reach host 127.0.0.2 on SSH port 1: connection refused", 15),
    ("SSH port of another service", ["-np", "1", "-H", "127.0.0.2:1", "-p", "{http_port}"],
     "host 127.0.0.2 on SSH port {http_port} answers, but not with SSH "
     "(it sent 'HTTP/1.0 400 Bad Request')", 15),
    ("SSH port that says nothing", ["-np", "1", "-H", "127.0.0.2:1", "-p", "{silent_port}"],
     "host 127.0.0.2 on SSH port {silent_port} accepted the connection but sent no SSH "
     "greeting within 5 s", 15),
    # Both hosts take the full 5 s: checked side by side, the launch takes
    # about 5 s, not 10.
    ("two silent hosts, checked side by side",
     ["-np", "2", "-H", "127.0.0.2:1,127.0.0.3:1", "-p", "{silent_port}"],
     "its SSH port? (and 1 more host with problems)", 9.5),
    # Our ssh knows neither the test sshd's host key nor a key it accepts:
    # the host key fails first, and the line names it with its fix.
    ("sshd whose host key is unknown", ["-np", "1", "-H", "127.0.0.2:1", "-p", "{sshd_port}"],
     "host 127.0.0.2: ssh fails (Host key verification failed): its host key is not known "
     "here: add it to ~/.ssh/known_hosts (ssh-keyscan -p {sshd_port} 127.0.0.2, checked)", 20),
]


@pytest.fixture
def placeholders(request, tmp_path) -> dict:
    """Values for the {names} in a case; services start only for the cases
    that name them."""
    files = {"hostfile_bad_line": "# this machine\n127.0.0.1 slots=1\nlocalhost slot=2\n",
             "hostfile_no_hosts": "# every host drained\n\n",
             "hostfile_zero_slots": "localhost slots=0\n",
             "hostfile_good": "localhost slots=2\n"}
    values = {"tmp": str(tmp_path)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        values[name] = str(tmp_path / name)
    case = request.node.callspec.params
    wanted = " ".join(case["options"]) + case["message"]
    for service in ("http_port", "silent_port", "sshd_port"):
        if "{" + service + "}" in wanted:
            values[service] = request.getfixturevalue(service)
    return values


@pytest.mark.parametrize("case, options, message, seconds", LAUNCH_CASES,
                         ids=[case[0] for case in LAUNCH_CASES])
def test_bad_launch_input_is_one_line_and_exit_2_before_anything_starts(
        case, options, message, seconds, placeholders, tmp_path):
    options = [option.format(**placeholders) for option in options]
    markers = tmp_path / "markers"
    markers.mkdir()
    result, elapsed = launch(*options, *marker_command(markers))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("launch: error: ")
    assert message.format(**placeholders) in lines[0]
    assert result.stdout == ""
    assert list(markers.iterdir()) == []  # nothing was started
    assert elapsed < seconds, f"took {elapsed:.1f} s"


def test_no_command_is_one_line():
    result, _ = launch("-np", "1", "-H", "localhost:1")
    assert result.returncode == 2
    assert result.stderr == ("launch: error: no command to run: give it after horovodrun's "
                             "options, e.g. python horovod_train/pytorch_mnist.py\n")


def test_help_says_what_is_checked():
    result, _ = launch("--help")
    assert result.returncode == 0
    for words in ("horovodrun's arguments", "-hostfile", "-np", "SSH port", "exit 2"):
        assert words in result.stdout, words


# OpenMPI's conventions, which horovodrun's own hostfile reader fails on: a
# comment line, a trailing comment, a blank line, a host alone (one slot).
OPENMPI_HOSTFILE = "# this machine, under two names\n\nlocalhost slots=1  # first\n127.0.0.1\n"


@pytest.mark.parametrize("hosts", [["-H", "localhost:2"], ["-hostfile", "{hostfile_good}"],
                                   ["--hostfile={hostfile_openmpi}"],
                                   ["-H", "127.0.0.1:1,localhost:1"]],
                         ids=["-H", "hostfile", "OpenMPI hostfile", "local names"])
def test_good_input_runs_horovodrun_with_the_same_arguments(hosts, tmp_path):
    (tmp_path / "hostfile_good").write_text("localhost slots=2\n")
    (tmp_path / "hostfile_openmpi").write_text(OPENMPI_HOSTFILE)
    hosts = [h.format(hostfile_good=tmp_path / "hostfile_good",
                      hostfile_openmpi=tmp_path / "hostfile_openmpi") for h in hosts]
    markers = tmp_path / "markers"
    markers.mkdir()
    result, _ = launch("-np", "2", *hosts, "--gloo", *marker_command(markers))
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(list(markers.iterdir())) == 2  # one per rank


def test_horovodrun_alone_fails_on_the_hostfile_the_launcher_runs(tmp_path):
    """Why the launcher hands horovodrun -H instead of the file: horovodrun's
    own reader ends in a traceback on a comment line."""
    (tmp_path / "hostfile").write_text(OPENMPI_HOSTFILE)
    markers = tmp_path / "markers"
    markers.mkdir()
    result = subprocess.run([str(BIN / "horovodrun"), "-np", "2", "-hostfile",
                             str(tmp_path / "hostfile"), "--gloo", *marker_command(markers)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and list(markers.iterdir()) == []
    # Its reader splits "# this machine, ..." at "=" for the slots: a traceback, no rank.
    assert "slots = line.split('=')[1]" in result.stderr, result.stderr[-2000:]
    assert result.stderr.rstrip().endswith("IndexError: list index out of range")


@pytest.mark.parametrize("controller", ["mpi", "gloo"])
def test_the_ranks_get_the_projects_open_mpi_settings_unless_set(controller):
    """docker/openmpi-mca-params.conf (mpirun's keepalive to its daemons,
    Open MPI yielding its core while it waits) reaches a launch of any
    script outside the image; a value the user set wins."""
    # One write: horovodrun tags each piece of a line that print() writes apart.
    show = [str(BIN / "python"), "-c", "import os, sys; sys.stdout.write(' '.join(['keepalive', "
            "*(os.environ['OMPI_MCA_oob_tcp_keepalive_' + n] for n in ('time', 'intvl', "
            "'probes')), 'yield', os.environ['OMPI_MCA_mpi_yield_when_idle']]) + '\\n')"]
    ours, _ = launch("-np", "1", "-H", "localhost:1", f"--{controller}", *show)
    assert "keepalive 10 5 3 yield 1" in ours.stdout, ours.stdout + ours.stderr
    users, _ = launch("-np", "1", "-H", "localhost:1", f"--{controller}", *show,
                      env={**ENV, "OMPI_MCA_oob_tcp_keepalive_time": "42"})
    assert "keepalive 42 5 3 yield 1" in users.stdout, users.stdout + users.stderr


def test_a_failing_command_fails_the_launch(tmp_path):
    """A rank's own exit status is named, and the launch fails with 1 (a run
    that started and failed)."""
    result, _ = launch("-np", "1", "-H", "localhost:1", "--gloo",
                       str(BIN / "python"), "-c", "raise SystemExit(3)")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Process 0 exit with status code 3." in result.stdout + result.stderr


# --- bad input the trainer finds, launched for real ------------------------------

@pytest.fixture(scope="module")
def trainer_inputs(mnist_dir, tmp_path_factory) -> dict:
    """Data directories damaged one way each, and a checkpoint of mnist_cnn."""
    root = tmp_path_factory.mktemp("bad-inputs")
    good_raw = mnist.raw_dir(mnist_dir)

    def damaged(name: str) -> Path:
        shutil.copytree(good_raw, mnist.raw_dir(root / name))
        return mnist.raw_dir(root / name)

    # A subset is written as plain files, the ones a reader takes first.
    images = mnist.read_pair(good_raw, "train").images
    plain = damaged("bad-magic") / "train-images-idx3-ubyte"
    plain.write_bytes(b"\x00\x00\x04\xd2" + plain.read_bytes()[4:])  # magic 1234
    plain = damaged("truncated") / "train-images-idx3-ubyte"
    plain.write_bytes(plain.read_bytes()[:-100])
    raw = damaged("count")
    mnist.write_idx(raw / "train-labels-idx1-ubyte", np.zeros(len(images) - 1, np.uint8))

    model = build_model("mnist_cnn")
    checkpoint.save(root, model, torch.optim.SGD(model.parameters(), lr=0.1), "mnist_cnn", 1, {})
    (root / "file").write_text("not a directory")
    return {"good": mnist_dir, "root": root}


# (case, trainer options, what every rank's one line must say)
TRAINER_CASES = [
    ("missing data offline", ["--data-dir", "{root}/none"],
     "MNIST files missing in {root}/none/MNIST/raw: train-images-idx3-ubyte"),
    ("bad magic number", ["--data-dir", "{root}/bad-magic"],
     "train-images-idx3-ubyte: bad magic number 1234 (expected 2051 for MNIST images)"),
    ("truncated file", ["--data-dir", "{root}/truncated"],
     "train-images-idx3-ubyte: truncated: header declares 8000x28x28 = 6272000 bytes"),
    ("label count differs from image count", ["--data-dir", "{root}/count"],
     "holds 8000 images but {root}/count/MNIST/raw/train-labels-idx1-ubyte holds "
     "7999 labels"),
    ("batch larger than a rank's shard", ["--data-dir", "{good}", "--batch-size", "5000"],
     "--batch-size 5000 is larger than a rank's shard: 8000 training images over 2 ranks "
     "are 4000 per rank"),
    ("unwritable log directory", ["--data-dir", "{good}", "--log-dir", "{root}/file/run"],
     "cannot create {root}/file/run: {root}/file is not a directory"),
    ("unwritable checkpoint directory",
     ["--data-dir", "{good}", "--checkpoint-dir", "{root}/file/checkpoints"],
     "cannot create {root}/file/checkpoints: {root}/file is not a directory"),
    ("checkpoint of another model",
     ["--data-dir", "{good}", "--checkpoint-dir", "{root}", "--resume",
      "--model", "horovod_example"],
     "{root}/checkpoint.pt holds model 'mnist_cnn', this run trains 'horovod_example'"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, options, message", TRAINER_CASES,
                         ids=[case[0] for case in TRAINER_CASES])
def test_bad_trainer_input_ends_every_rank_with_one_line(case, options, message,
                                                         trainer_inputs, tmp_path):
    values = {"root": trainer_inputs["root"], "good": trainer_inputs["good"]}
    options = [option.format(**values) for option in options]
    log_dir = tmp_path / "run"
    if "--log-dir" not in options:
        options += ["--log-dir", str(log_dir)]
    result, elapsed = launch("-np", "2", "-H", "localhost:2", "--gloo", str(BIN / "python"),
                             TRAINER, "--no-download", "--no-progress", "--epochs", "1",
                             *options)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    # Bad input: the rank's own exit is 2 (horovodrun's report names it; its own is 1).
    assert "Exit code: 2" in output, output[-3000:]
    errors = [line for line in output.splitlines() if "pytorch_mnist.py: error:" in line]
    # One line from each rank; horovodrun may stop the second before it prints.
    assert 1 <= len(errors) <= 2, output[-3000:]
    assert all(message.format(**values) in line for line in errors), errors
    assert elapsed < 60, f"took {elapsed:.1f} s"
    # No outputs: the data are read and both directories checked before any is
    # made; a refused checkpoint is found after, in directories left empty.
    assert [path for path in log_dir.rglob("*") if not path.is_dir()] == []
    if case != "checkpoint of another model":
        assert not log_dir.exists()


# --- the same fault, the same words, from every entry point ----------------------

LAUNCH_CLUSTER = REPO / "scripts" / "launch_cluster.sh"

# (fault, message after `PROG: error: `, the entry points and their argv)
ENTRY_FAULTS = [
    ("unknown host", UNKNOWN_HOST, {
        "launch": [str(LAUNCH), "-np", "1", "-H", "no-such-host.invalid:1", "true"],
        "launch_cluster": [str(LAUNCH_CLUSTER), "--hosts", "no-such-host.invalid:1",
                           "--keys", "/k", "--", "true"],
        "pytorch_mnist.py": [str(BIN / "python"), TRAINER, "--num-proc", "1", "--hosts",
                             "no-such-host.invalid:1"]}),
    ("unknown host key", UNKNOWN_HOST_KEY, {
        "launch": [str(LAUNCH), "-np", "1", "-H", "127.0.0.2:1", "-p", "{sshd_port}", "true"],
        "preflight": [str(REPO / "scripts" / "preflight.sh"), "-H", "127.0.0.2:1", "-p",
                      "{sshd_port}", "--no-allreduce"]}),
    ("bad port range", BAD_PORT_RANGE, {
        "launch": ["env", "HVT_PORTS=50000", str(LAUNCH), "-np", "1", "-H", "localhost:1", "true"],
        "pytorch_mnist.py": ["env", "HVT_PORTS=50000", str(BIN / "python"), TRAINER,
                             "--num-proc", "1"]}),
    ("bad trainer option", BAD_TRAINER_OPTION, {
        "launch": [str(LAUNCH), "-np", "1", "-H", "localhost:1", str(BIN / "python"), TRAINER,
                   "--epochs", "x"],
        "pytorch_mnist.py": [str(BIN / "python"), TRAINER, "--num-proc", "1", "--epochs", "x"]}),
]


@pytest.mark.parametrize("fault, message, entries", ENTRY_FAULTS,
                         ids=[fault for fault, _, _ in ENTRY_FAULTS])
def test_the_same_fault_gives_the_same_line_and_exit_from_every_entry_point(
        fault, message, entries, request):
    """launch/pipeline.py's convention: bad input is one line `PROG: error:
    ...` and exit 2 wherever it is met (the preflight, whose job is to name
    culprits, names it among them, exit 1), before anything starts."""
    port = request.getfixturevalue("sshd_port") if "{sshd_port}" in str(entries) else None
    for prog, argv in entries.items():
        argv = [word.format(sshd_port=port) for word in argv]
        result = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True,
                                timeout=60)
        said = [line for line in result.stderr.splitlines() if f"{prog}: " in line]
        if prog == "preflight":
            assert result.returncode == 1, result.stderr
            assert f"preflight: {message}" in said[0], result.stderr
            continue
        assert result.returncode == 2, (prog, result.stdout + result.stderr)
        assert len(said) == 1 and said[0].startswith(f"{prog}: error: "), result.stderr
        assert said[0].endswith(message) or message in said[0], (prog, said)
