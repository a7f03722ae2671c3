"""Shared fixtures: the real MNIST digits, the emulated cluster, and a helper
that runs horovodrun for real and reads the trainer's summary.

The tests are split by kind, a folder each, each runnable on its own
(`scripts/test.sh tests/single`) and marked by its folder (`-m single`):
  single/    in process, in seconds: the rules (the loop, options, sharding,
             records, parsers)
  parallel/  processes on this host: horovodrun jobs, the trainers and
             scripts as users run them
  cluster/   root: emulated hosts, the images run as hosts, Slurm, the soak
A file sits in the folder of the heaviest test it holds."""

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import module_sharing
import pytest
from cpu_account import CpuAccount
from module_sharing import pytest_runtestloop  # noqa: F401  (a hook of this conftest)

from horovod_train.core import mnist
from horovod_train.emulation.cluster import STATE_DIR

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv running the tests: horovodrun lives here
TRAINER = "horovod_train/pytorch_mnist.py"
EMULATE = REPO / "scripts" / "emulate_cluster.sh"
# The 10,000 real MNIST test digits: beside the checkout, or where HVT_MNIST_T10K_DIR says.
T10K_DIR = Path(os.environ.get("HVT_MNIST_T10K_DIR",
                               REPO.parent / "shared" / "datasets" / "mnist-t10k"))



def committed_results(suffix: str) -> list[str]:
    """The committed files under benchmarks/results ending in suffix, as
    paths relative to the checkout."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "benchmarks/results"],
                            capture_output=True, text=True, check=True).stdout.split()
    return [name for name in listed if name.endswith(suffix)]

KINDS = ("single", "parallel", "cluster")


def pytest_collection_modifyitems(items):
    """Each test is marked with its folder's kind and put in the order the
    suite runs in: the tests on emulated hosts first, grouped by the hosts
    they need (changing kinds rebuilds the hosts), then the others, and
    last the tests of the images, which scripts/test.sh builds meanwhile."""
    for item in items:
        kind = item.path.parent.name
        if kind in KINDS:
            item.add_marker(kind)

    def order(item) -> tuple:
        image = needs_image(item)
        if image:
            return 2, IMAGE_ORDER.index(image), HOST_KINDS.index(hosts_kind(item) or "plain")
        kind = hosts_kind(item)
        return (0, 0, HOST_KINDS.index(kind)) if kind else (1, 0, 0)

    items.sort(key=order)  # stable: the order within a group is kept


# The kinds of emulated hosts, in the order the tests use them.
HOST_KINDS = ("plain", "decoys", "image", "routed", "two-network", "four")
# The images, in the order scripts/test.sh builds them.
IMAGE_ORDER = ("cpu", "gpu", "app")


def hosts_kind(item) -> str | None:
    """The emulated hosts a test needs (HOST_KINDS), or None."""
    names = set(item.fixturenames)
    params = getattr(item, "callspec", None)
    # A test may name its hosts' fixture as a parameter (request.getfixturevalue).
    names |= {value for value in (params.params.values() if params else ())
              if isinstance(value, str)}
    if "routed_cluster" in names:
        return "routed"
    if "two_network_cluster" in names:
        return "two-network"
    if "four_host_cluster" in names:
        return "four"
    if names & {"decoy_cluster", "local_slurm"}:
        return "decoys"
    if (names & {"image_cluster", "app_image", "variant"}
            or (params is not None and params.params.get("host_kind") == "image")):
        return "image"
    if names & {"emulated", "cluster", "host_kind"}:
        return "plain"
    return None


def needs_image(item) -> str | None:
    """The image a test needs built (IMAGE_ORDER), or None."""
    names = set(item.fixturenames)
    params = getattr(item, "callspec", None)
    if "variant" in names and params is not None:
        return params.params["variant"]
    for device in reversed(IMAGE_ORDER):
        if f"{device}_image" in names:
            return device
    if (names & {"image_cluster", "podman_base"}
            or (params is not None and params.params.get("host_kind") == "image")):
        return "cpu"
    return None


# --- what each test costs --------------------------------------------------------
# Every run records each test's wall time and how busy the machine's cores
# were meanwhile (/proc/stat: every process, Slurm's and the emulated hosts'
# too, and scripts/test.sh's tests beside the emulated hosts' and its image
# builds; a process's own nice, which the kernel counts apart, is left out):
# a test that mostly waits (on a timeout, a host, Slurm) shows a low share
# and idle core-seconds, one that trains a high share. Where this run can
# count its own processes' CPU time (tests/cpu_account.py), each test's CPU
# seconds too: its work, which sharing the cores does not inflate as it
# does the wall time. One JSON line a test in the file --test-costs names,
# and a table a file at the end of the run.
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_costs: list[dict] = []
_cpu = CpuAccount()


def cpu_ticks() -> tuple[int, int, int]:
    """The machine's CPU time since boot, in ticks: (busy, idle, all)."""
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, steal = map(
            int, stat.readline().split()[1:9])
    return user + system + irq + softirq, idle + iowait, \
        user + nice + system + idle + iowait + irq + softirq + steal


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started, before, cpu_before = time.monotonic(), cpu_ticks(), _cpu.seconds()
    yield
    wall = time.monotonic() - started
    busy, idle, total = (after - first for after, first in zip(cpu_ticks(), before, strict=True))
    cost = {"test": item.nodeid, "wall_s": round(wall, 2),
            "cores_busy": round(busy / total, 2) if total else 0.0,
            "idle_core_s": round(idle / TICKS_PER_S, 1)}
    if cpu_before is not None:
        cost["cpu_s"] = round(_cpu.seconds() - cpu_before, 2)
    _costs.append(cost)


def pytest_terminal_summary(terminalreporter, config):
    if not _costs:
        return
    costs_path = REPO / config.getoption("test_costs")  # relative: to the checkout
    costs_path.parent.mkdir(parents=True, exist_ok=True)
    with costs_path.open("w") as file:
        file.writelines(json.dumps(cost) + "\n" for cost in _costs)
    files: dict[str, list[dict]] = {}
    for cost in _costs:
        files.setdefault(cost["test"].split("::")[0], []).append(cost)
    rows = sorted(((sum(c["wall_s"] for c in costs), name, costs)
                   for name, costs in files.items()), reverse=True)
    write = terminalreporter.write_line
    write(f"test costs by file ({config.getoption('test_costs')} has each test):")
    counted = all("cpu_s" in cost for cost in _costs)
    write(f"{'wall s':>8} {'tests':>5} {'busy':>5} {'idle core-s':>11}"
          f"{' own cpu s' if counted else ''}  file")
    for wall, name, costs in rows:
        busy = sum(c["wall_s"] * c["cores_busy"] for c in costs)  # busy share, weighted
        idle = sum(c["idle_core_s"] for c in costs)
        own = f" {sum(c['cpu_s'] for c in costs):10.1f}" if counted else ""
        write(f"{wall:8.1f} {len(costs):5d} {busy / wall if wall else 0:5.0%} {idle:11.0f}"
              f"{own}  {name}")
    if counted:
        write(f"own cpu s: this run's processes, {sum(c['cpu_s'] for c in _costs):.0f} s in all")


def pytest_unconfigure(config):
    _cpu.close()


def pytest_addoption(parser):
    parser.addoption("--test-costs", default="runs/test-costs.jsonl", metavar="PATH",
                     help="where each test's cost goes, a JSON line each, relative to the "
                          "checkout (default: %(default)s)")
    soak = parser.getgroup("soak", "tests/cluster/test_soak.py: the two-host command again "
                                   "and again")
    soak.addoption("--soak-runs", type=int, default=0, metavar="N",
                   help="consecutive runs, alternating Gloo and MPI (default 0: the two-host "
                        "runs are test_pytorch_mnist_cluster.py's; 20 for the long soak)")
    soak.addoption("--soak-faults", type=int, default=1, metavar="N",
                   help="runs with a random fault at a random moment (default 1; 10 for the "
                        "long soak)")
    soak.addoption("--soak-seed", type=int, default=None,
                   help="the faults' random choices (default: a new seed, printed)")
    module_sharing.pytest_addoption(parser)


@pytest.fixture(scope="session")
def t10k_dir() -> Path:
    if not (T10K_DIR / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"the real MNIST test digits are not at {T10K_DIR} (set HVT_MNIST_T10K_DIR)")
    return T10K_DIR


@pytest.fixture(scope="session")
def mnist_dir(t10k_dir, tmp_path_factory) -> Path:
    """Real digits in the torchvision layout: first 8,000 train, last 2,000 test."""
    data_dir = tmp_path_factory.mktemp("mnist")
    mnist.write_subset(t10k_dir, data_dir, 8000, 2000)
    return data_dir


@pytest.fixture(scope="session")
def small_mnist_dir(t10k_dir, tmp_path_factory) -> Path:
    """A fifth of mnist_dir (1,600 train, 400 test): for tests of what a run
    does (refusals, resume, its outputs), not of the accuracy it reaches."""
    data_dir = tmp_path_factory.mktemp("small-mnist")
    mnist.write_subset(t10k_dir, data_dir, 1600, 400)
    return data_dir


def mounted_tmpfs(disk: Path, size: str):
    """A tmpfs of `size` (mount's size=) mounted at `disk`, for a fixture to
    yield from; skips where mount is not allowed (not root)."""
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small disk needs mount (root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 3 MiB tmpfs: room for one checkpoint of mnist_cnn (1.7 MB) and the
    logs, not for the temporary file of the next one."""
    yield from mounted_tmpfs(tmp_path / "disk", "3m")


def cluster_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"the emulated cluster needs {tool}"
    if not Path("/usr/sbin/sshd").exists():
        return "the emulated cluster needs sshd (openssh-server)"
    probe = subprocess.run(["ip", "netns", "add", "hvt-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces unavailable: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "hvt-probe"], capture_output=True)
    return None


class EmulatedCluster:
    """Hosts a and b for the whole session, as plain hosts (this machine's
    files) or as containers of an image; switching kinds rebuilds them."""

    def __init__(self):
        self.kind = None
        self.layout = None

    def ensure(self, *up_args: str) -> dict:
        if self.kind != up_args:
            up = subprocess.run([str(EMULATE), "up", *up_args], capture_output=True, text=True,
                                timeout=300)
            assert up.returncode == 0, up.stderr
            self.layout = json.loads((STATE_DIR / "cluster.json").read_text())
            self.kind = up_args
        return self.layout

    def down(self):
        subprocess.run([str(EMULATE), "down"], capture_output=True, timeout=300)
        self.kind = None


@pytest.fixture(scope="session")
def emulated():
    """The emulated cluster's manager; everything is removed at the end of
    the session, even when tests fail."""
    reason = cluster_skip_reason()
    if reason:
        pytest.skip(reason)
    manager = EmulatedCluster()
    try:
        yield manager
    finally:
        manager.down()


@pytest.fixture
def cluster(emulated) -> dict:
    """Plain hosts a and b: network namespaces, sshd on 22 as on bare hosts."""
    return emulated.ensure()


@contextlib.contextmanager
def firewall_on_b(ssh_port: int, *open_ports: str):
    """Host b lets in ssh, the `open_ports` ranges (TCP and UDP) and what
    answers its own connections, nothing else."""
    rules = [["INPUT", "-i", "lo", "-j", "ACCEPT"],
             ["INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
             ["INPUT", "-p", "tcp", "--dport", str(ssh_port), "-j", "ACCEPT"],
             *[["INPUT", "-p", proto, "--dport", ports, "-j", "ACCEPT"]
               for ports in open_ports for proto in ("tcp", "udp")],
             ["INPUT", "-j", "DROP"]]
    iptables = ["ip", "netns", "exec", "hvt-b", "iptables"]
    for rule in rules:
        subprocess.run([*iptables, "-A", *rule], check=True, timeout=30)
    try:
        yield
    finally:
        for rule in reversed(rules):
            subprocess.run([*iptables, "-D", *rule], check=True, timeout=30)


@contextlib.contextmanager
def interface_renamed(host: str, old: str, new: str):
    """An emulated host's interface under another name for a block, as on
    nodes whose interface names differ (down, renamed, up: its address and
    routes come back with it); its own name back afterwards, also when the
    block fails."""
    def rename(before: str, after: str) -> None:
        for args in (["set", before, "down"], ["set", before, "name", after],
                     ["set", after, "up"]):
            subprocess.run(["ip", "-n", f"hvt-{host}", "link", *args], check=True,
                           capture_output=True, timeout=30)
        deadline = time.monotonic() + 10
        while "LOWER_UP" not in subprocess.run(
                ["ip", "-n", f"hvt-{host}", "-j", "link", "show", after], capture_output=True,
                text=True, timeout=30).stdout:
            assert time.monotonic() < deadline, f"{host}'s {after} has no carrier"
            time.sleep(0.1)

    rename(old, new)
    try:
        yield
    finally:
        rename(new, old)


@pytest.fixture
def routed_cluster(emulated) -> dict:
    """Plain hosts a and b on subnets of their own, joined by a router
    namespace (emulate_cluster.sh up --routed)."""
    return emulated.ensure("--routed")


@pytest.fixture
def two_network_cluster(emulated) -> dict:
    """Plain hosts a and b on eth0 and on eth2, a second network limited to
    20 Mbit/s each way (emulate_cluster.sh up --second-network 20mbit)."""
    return emulated.ensure("--second-network", "20mbit")


@pytest.fixture
def four_host_cluster(emulated) -> dict:
    """Plain hosts a, b, c and d (emulate_cluster.sh up --hosts a,b,c,d)."""
    return emulated.ensure("--hosts", "a,b,c,d")


@pytest.fixture
def decoy_cluster(emulated) -> dict:
    """Plain hosts a and b with the interfaces that mislead multi-host jobs
    besides eth0 (emulate_cluster.sh up --decoys): docker0, mgmt0, eth1."""
    return emulated.ensure("--decoys")


# The images scripts/test.sh builds with scripts/build_image.sh: the two
# variants of the environment, and the one that carries the code (--app).
# A stand-in NVIDIA driver: the two entry points the driver checks call
# (test_driver_check_run.py, and the GPU image's entrypoint in
# test_image_cluster.py), answering from the environment.
DRIVER_SOURCE = r"""
#include <stdlib.h>
#include <string.h>
int cuDriverGetVersion(int *version) { *version = atoi(getenv("DRIVER_CUDA")); return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlSystemGetDriverVersion(char *text, unsigned int length) {
    strncpy(text, getenv("DRIVER_RELEASE"), length);
    return 0;
}
"""


IMAGES = {"cpu": os.environ.get("HVT_CPU_IMAGE", "localhost/horovod-train:cpu"),
          "gpu": os.environ.get("HVT_GPU_IMAGE", "localhost/horovod-train:gpu"),
          "app": os.environ.get("HVT_APP_IMAGE", "localhost/horovod-train:app")}


# Where scripts/test.sh's image builds (beside the setup, and beside the tests
# that a selection runs) say how each ended: DEVICE.status holds build_image.sh's
# exit code once it has.
IMAGE_BUILDS = os.environ.get("HVT_TEST_IMAGE_BUILDS")
IMAGE_BUILD_WAIT_S = 3600


def wait_for_image_build(device: str, ready=lambda: False) -> None:
    """Until scripts/test.sh's build of the image has ended, or `ready()`
    says that what the test needs of it is there (nothing to wait for where
    the tests run without it); a failed build fails the test."""
    if not IMAGE_BUILDS:
        return
    status = Path(IMAGE_BUILDS) / f"{device}.status"
    deadline = time.monotonic() + IMAGE_BUILD_WAIT_S
    while not status.exists():
        if ready():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the {device} image's build did not end in {IMAGE_BUILD_WAIT_S} s")
        time.sleep(2)
    code = status.read_text().strip()
    if code != "0":
        pytest.fail(f"scripts/build_image.sh for the {device} image exited {code}: "
                    f"{status.with_suffix('.log')}")


def require_image(device: str) -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/build_image.sh installs it)")
    wait_for_image_build(device)
    image = IMAGES[device]
    if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        how = "--app" if device == "app" else f"--device {device}"
        pytest.skip(f"no image {image}: scripts/build_image.sh {how} builds it")
    return image


@pytest.fixture(scope="session")
def cpu_image() -> str:
    return require_image("cpu")


@pytest.fixture(scope="session")
def gpu_image() -> str:
    return require_image("gpu")


@pytest.fixture(scope="session")
def app_image() -> str:
    """The image that carries the code, on the GPU image's layers."""
    return require_image("app")


@pytest.fixture(scope="session")
def image_mounts(mnist_dir, tmp_path_factory) -> dict:
    """Host directories every image host sees: the digits read-only at
    /data, and /runs for the trainers' outputs."""
    runs = tmp_path_factory.mktemp("image-runs")
    # The image's user (not root) reads the digits and writes the outputs.
    mnist_dir.chmod(0o755)
    runs.chmod(0o777)
    return {"data": mnist_dir, "runs": runs}


def image_hosts(emulated, image: str, image_mounts: dict) -> dict:
    """Hosts a and b as containers of an image (its entrypoint, its sshd)
    with the documented mounts: the checkout at /workspace, the data, the
    outputs."""
    return emulated.ensure("--image", image,
                           "--mount", f"{REPO}:/workspace:ro",
                           "--mount", f"{image_mounts['data']}:/data:ro",
                           "--mount", f"{image_mounts['runs']}:/runs")


@pytest.fixture
def image_cluster(emulated, cpu_image, image_mounts) -> dict:
    """Hosts a and b as containers of the CPU image."""
    return image_hosts(emulated, cpu_image, image_mounts)


@functools.cache  # --check-build imports every framework: 20 s each time
def horovod_frameworks() -> set[str]:
    """Frameworks the installed Horovod was built for, as --check-build says."""
    report = subprocess.run([str(BIN / "horovodrun"), "--check-build"], capture_output=True,
                            text=True, timeout=120).stdout
    return {name for name in ("PyTorch", "TensorFlow", "MXNet") if f"[X] {name}" in report}


def require_framework(name: str) -> None:
    if name not in horovod_frameworks():
        pytest.skip(f"Horovod is not built for {name} here: "
                    "scripts/setup.sh --frameworks pytorch,tensorflow,mxnet")


def assert_trained(run: "Run", size: int, controller: str, hosts: dict,
                   min_accuracy: float = 0.95) -> dict:
    """A finished run: every rank present, identical weights, the accuracy
    reached, and totals that are the sums of the ranks' figures."""
    assert run.returncode == 0, run.output[-3000:]
    summary = run.summary
    assert summary["size"] == size
    assert summary["controller"] == controller
    assert summary["hosts"] == hosts
    assert sorted(r["rank"] for r in summary["ranks"]) == list(range(size))
    assert summary["weights_identical"] is True
    assert len(set(summary["rank_digests"])) == 1
    assert summary["test_accuracy"] >= min_accuracy, summary["test_accuracy"]
    assert summary["images_per_sec"] == pytest.approx(
        sum(r["images_per_sec"] for r in summary["ranks"]))
    assert all(r["images_per_sec"] > 0 for r in summary["ranks"])
    assert "weights identical on all ranks: yes" in run.output
    assert_clean_output(run.output)
    return summary


# horovodrun's prefix of a rank's output: [rank]<stream>: under Gloo,
# [job,rank]<stream>: under MPI.
RANK_PREFIX = re.compile(r"\[\d+(?:,\d+)?\]<std(?:out|err)>:")


def assert_clean_output(output: str) -> None:
    """Whole lines: no progress bar's carriage returns, and a rank's prefix
    only at the start of a line, never glued to the end of another."""
    assert "\r" not in output
    for line in output.splitlines():
        rest = line[m.end():] if (m := RANK_PREFIX.match(line)) else line
        assert not RANK_PREFIX.search(rest), line


def marker_command(directory: Path) -> list[str]:
    """A command that leaves a file per process it runs as, so a test can
    tell whether anything was started."""
    code = ("import os, pathlib; pathlib.Path(os.environ['MARKERS'], "
            "str(os.getpid())).write_text('ran')")
    return ["env", f"MARKERS={directory}", str(BIN / "python"), "-c", code]


def on_host(host: str, command: list[str]) -> list[str]:
    return [str(EMULATE), "exec", host, "--", *command]


def host_processes(host: str) -> dict[int, str]:
    """The processes in an emulated host's namespace and their command lines."""
    pids = subprocess.run(["ip", "netns", "pids", f"hvt-{host}"], capture_output=True,
                          text=True, check=True).stdout.split()
    found = {}
    for pid in pids:
        try:
            found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(
                b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
    return found


def trainer_pids(log_dir: Path, script: str = "pytorch_mnist.py") -> dict[int, int]:
    """Every process on this machine (the emulated hosts' included) of the
    trainer `script` writing to log_dir, and its Horovod rank, read from its
    environment. The log dir tells this run's ranks from any other test's."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if script.encode() not in cmdline or str(log_dir).encode() not in cmdline:
                continue
            environ = dict(item.split("=", 1) for item in
                           (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                           if "=" in item)
        except (FileNotFoundError, ProcessLookupError):
            continue
        rank = environ.get("HOROVOD_RANK", environ.get("OMPI_COMM_WORLD_RANK"))
        if rank is not None:
            found[int(entry.name)] = int(rank)
    return found


def signal_rank_after_epoch_1(script: str, data_dir: Path, log_dir: Path, signum: int,
                              *options: str) -> tuple[int, str, float]:
    """Two ranks of the trainer `script` here (horovodrun --gloo), rank 1
    sent `signum` once rank 0 has said epoch 1: horovodrun's exit code, its
    whole output, and the seconds from the signal to its end."""
    job = subprocess.Popen(
        [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", str(BIN / "python"),
         f"horovod_train/{script}", "--data-dir", str(data_dir), "--no-download",
         "--epochs", "50", "--no-progress", "--log-dir", str(log_dir), *options],
        cwd=REPO, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output = []
        for line in job.stdout:
            output.append(line)
            if "epoch 1:" in line:
                break
        ranks = {rank: pid for pid, rank in trainer_pids(log_dir, script).items()}
        os.kill(ranks[1], signum)
        signalled_at = time.monotonic()
        output.append(job.communicate(timeout=120)[0])
        return job.returncode, "".join(output), time.monotonic() - signalled_at
    finally:
        job.kill()
        job.wait()


def run_on(host: str, *command: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """Run a command on an emulated host, its output captured as text."""
    return subprocess.run(on_host(host, list(command)), capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class Run:
    returncode: int
    output: str
    log_dir: Path

    @property
    def summary(self) -> dict:
        return json.loads((self.log_dir / "summary.json").read_text())

    @property
    def lines(self) -> list[dict]:
        return [json.loads(line)
                for line in (self.log_dir / "metrics.jsonl").read_text().splitlines()]

    @property
    def epochs(self) -> list[dict]:
        """The epochs' lines (--log-interval's lines have a batch)."""
        return [line for line in self.lines if "batch" not in line]


def horovodrun(launch: list[str], trainer_args: list[str], log_dir: Path, host: str | None = None,
               timeout: int = 400, trainer: str = TRAINER, progress: bool = False) -> Run:
    """horovodrun LAUNCH python TRAINER --log-dir LOG_DIR TRAINER_ARGS, from the
    checkout, on the machine itself or inside emulated host `host`; with
    --no-progress unless `progress`."""
    command = [str(BIN / "horovodrun"), *launch, str(BIN / "python"), trainer,
               "--log-dir", str(log_dir), *([] if progress else ["--no-progress"]),
               *trainer_args]
    if host:
        command = on_host(host, command)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=timeout)
    return Run(result.returncode, result.stdout + result.stderr, log_dir)
