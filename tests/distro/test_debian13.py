"""The distro tier: the README's setup and a 2-rank run on a bare Debian 13
(trixie, Python 3.13), for real. Not in the default run (pyproject.toml's
norecursedirs leaves tests/distro out); start it with
`scripts/test.sh tests/distro` (root, Debian's archive and PyPI reachable,
about 15 GB free: torch's CUDA wheels).

A minbase tree made by debootstrap, as the image's base is, is cached
(HVT_DISTRO_CACHE, default ~/.cache/horovod-train/distro, with the apt
archives and pip's and uv's caches); each run copies it, copies this checkout in and
runs, chrooted, what a user types: scripts/setup.sh --frameworks
pytorch,tensorflow (system packages, .venv, Horovod compiled from source:
no wheel cache is shared with the host), then the PyTorch and TensorFlow
trainers with horovodrun -np 2 -H localhost:2 over Gloo and over MPI. What
was seen is written to runs/distro/debian13.json (HVT_DISTRO_RECORD names
another file); a committed copy lives in benchmarks/results/."""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, T10K_DIR

from benchmarks.machine import machine_record
from horovod_train.core import mnist

pytestmark = [pytest.mark.distro, pytest.mark.slow, pytest.mark.timeout(5400)]

SUITE = "trixie"  # Debian 13
MIRROR = "http://deb.debian.org/debian"
CACHE = Path(os.environ.get("HVT_DISTRO_CACHE",
                            Path.home() / ".cache" / "horovod-train" / "distro"))
RECORD = Path(os.environ.get("HVT_DISTRO_RECORD", REPO / "runs" / "distro" / "debian13.json"))
FRAMEWORKS = "pytorch,tensorflow"  # what Python 3.13 takes
TRAINERS = {"pytorch": "horovod_train/pytorch_mnist.py",
            "tensorflow": "horovod_train/tensorflow2_mnist.py"}
# Inside the tree, where a user of the host would have them.
USER_DIR = "/home/user"
CHECKOUT = f"{USER_DIR}/horovod-train"
DATA = f"{USER_DIR}/mnist"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_CA = "/etc/ssl/host-ca.crt"  # inside the tree, bound from the host's bundle


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the distro tier needs root (debootstrap, chroot, mounts)"
    for tool in ("debootstrap", "chroot", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"the distro tier needs {tool}"
    if not (T10K_DIR / "t10k-images-idx3-ubyte.gz").is_file():
        return f"the real MNIST test digits are not at {T10K_DIR} (set HVT_MNIST_T10K_DIR)"
    return None


def host_ca() -> Path | None:
    """The CA bundle pip trusts here: through TLS inspection or a corporate
    proxy a fresh tree's own store does not do."""
    for candidate in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def base_tree() -> tuple[Path, float | None]:
    """The cached minbase tree, made once; the seconds debootstrap took, None
    when it was cached."""
    tree = CACHE / f"{SUITE}-minbase"
    if (tree / "COMPLETE").is_file():
        return tree, None
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = CACHE / f".{SUITE}-minbase.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(partial), MIRROR],
                   check=True, capture_output=True, timeout=1800)
    seconds = time.monotonic() - started
    (partial / "COMPLETE").write_text(f"debootstrap --variant=minbase {SUITE} {MIRROR}\n")
    shutil.rmtree(tree, ignore_errors=True)
    partial.rename(tree)
    return tree, seconds


def copy_checkout(root: Path) -> None:
    """This checkout's files as git sees them (tracked and untracked, not
    ignored: no .venv, no data, no runs)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                           check=True, capture_output=True).stdout.split(b"\0")
    target = root / CHECKOUT.lstrip("/")
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if not source.is_file():  # listed but deleted in the work tree
            continue
        destination = target / os.fsdecode(name)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination, follow_symlinks=False)


def in_tree(root: Path, command: str, timeout: int) -> subprocess.CompletedProcess:
    """`command` (bash) chrooted into root, in a mount and PID namespace of
    its own: /proc, /sys, /dev, the caches and the host's CA bundle bound in,
    all gone when it ends, with every process it started."""
    binds = [("/dev", "dev"), ("/sys", "sys"),
             (CACHE / "pip", "root/.cache/pip"), (CACHE / "uv", "root/.cache/uv"),
             (CACHE / "apt", "var/cache/apt/archives")]
    env = ["HOME=/root", f"PATH={PATH}", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive",
           "PIP_DISABLE_PIP_VERSION_CHECK=1", f"HVT_MNIST_T10K_DIR={DATA}/t10k"]
    ca = host_ca()
    if ca:
        (root / HOST_CA.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / HOST_CA.lstrip("/")).touch()
        binds.append((ca, HOST_CA.lstrip("/")))
        env.append(f"PIP_CERT={HOST_CA}")
    lines = ["set -e", f"mount -t proc proc {shlex.quote(str(root / 'proc'))}"]
    for source, inside in binds:
        if Path(source).is_dir():
            (root / inside).mkdir(parents=True, exist_ok=True)
        lines.append(f"mount --rbind {shlex.quote(str(source))} "
                     f"{shlex.quote(str(root / inside))}")
    lines.append(f"exec chroot {shlex.quote(str(root))} /usr/bin/env -i "
                 f"{' '.join(map(shlex.quote, env))} /bin/bash -c {shlex.quote(command)}")
    return subprocess.run(["unshare", "--mount", "--pid", "--fork", "bash", "-c",
                           "\n".join(lines)],
                          capture_output=True, text=True, timeout=timeout)


def tail(result: subprocess.CompletedProcess, lines: int = 40) -> str:
    return "\n".join((result.stdout + result.stderr).splitlines()[-lines:])


@pytest.fixture(scope="module")
def debian13(tmp_path_factory):
    """A fresh Debian 13 tree with this checkout set up by scripts/setup.sh;
    the record is written when the module's tests are done."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    for cache in ("pip", "uv", "apt/partial"):
        (CACHE / cache).mkdir(parents=True, exist_ok=True)
    record = {"machine": machine_record(), "suite": SUITE}
    base, debootstrap_s = base_tree()
    record["debootstrap_s"] = None if debootstrap_s is None else round(debootstrap_s, 1)
    root = tmp_path_factory.mktemp("debian13") / "root"
    started = time.monotonic()
    subprocess.run(["cp", "-a", str(base), str(root)], check=True)
    copy_checkout(root)
    mnist.write_subset(T10K_DIR, root / DATA.lstrip("/"), 8000, 2000)
    # The tree runs under this machine's hostname, which its /etc/hosts must
    # name, as Debian's installer writes it: Horovod's Gloo resolves it in
    # hvd.init(), and 0.28.1's Gloo crashes (SIGSEGV) where it cannot. A
    # minbase tree has no /etc/hosts at all: localhost too, or horovodrun
    # takes -H localhost:2 for a remote host.
    hosts = root / "etc" / "hosts"
    known = hosts.read_text() if hosts.exists() else ""
    with open(hosts, "a") as out:
        if "localhost" not in known:
            out.write("127.0.0.1\tlocalhost\n")
        out.write(f"127.0.1.1\t{socket.gethostname()}\n")
    record["copy_s"] = round(time.monotonic() - started, 1)
    record["debian_version"] = (root / "etc" / "debian_version").read_text().strip()

    started = time.monotonic()
    setup = in_tree(root, f"cd {CHECKOUT} && scripts/setup.sh --frameworks {FRAMEWORKS}",
                    timeout=3600)
    record["setup_s"] = round(time.monotonic() - started, 1)
    record["setup_exit"] = setup.returncode
    record["setup_tail"] = tail(setup, 12).splitlines()
    record["runs"] = {}
    yield {"root": root, "setup": setup, "record": record}
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=2) + "\n")
    print(f"distro record: {RECORD}", file=sys.stderr)


def test_setup_sets_up_pytorch_and_tensorflow_on_python_3_13(debian13):
    setup, record = debian13["setup"], debian13["record"]
    assert setup.returncode == 0, tail(setup)
    versions = in_tree(debian13["root"], f"{CHECKOUT}/.venv/bin/python -c '"
                       "import sys, numpy, torch, tensorflow, keras, horovod; "
                       "print(sys.version.split()[0], numpy.__version__, torch.__version__, "
                       "tensorflow.__version__, keras.__version__, horovod.__version__)'", 300)
    assert versions.returncode == 0, tail(versions)
    python, numpy, torch, tensorflow, keras, horovod = versions.stdout.split()[-6:]
    record.update(python=python, numpy=numpy, torch=torch, tensorflow=tensorflow, keras=keras,
                  horovod=horovod)
    assert python.startswith("3.13.")
    build = json.loads((debian13["root"] / CHECKOUT.lstrip("/") / ".venv" /
                        "horovod-build.json").read_text())
    record["horovod_build"] = {k: build[k] for k in ("abi", "mpi", "compiler", "frameworks")}
    wheel = next((debian13["root"] / "root/.cache/horovod-train/wheels").glob(
        "horovod-*/inputs.json"))
    record["horovod_build_minutes"] = json.loads(wheel.read_text())["build_minutes"]
    check = in_tree(debian13["root"], f"{CHECKOUT}/.venv/bin/horovodrun --check-build", 300)
    record["check_build"] = [line for line in check.stdout.splitlines() if "[X]" in line]
    assert check.returncode == 0, tail(check)
    assert {"[X] PyTorch", "[X] TensorFlow", "[X] MPI", "[X] Gloo"} <= {
        line.strip() for line in record["check_build"]}, check.stdout


def test_setup_refuses_mxnet_on_3_13_in_one_line(debian13):
    if debian13["setup"].returncode != 0:
        pytest.skip("setup failed (test_setup_sets_up_pytorch_and_tensorflow_on_python_3_13 "
                    "says how)")
    framework = "mxnet"
    refused = in_tree(debian13["root"],
                      f"cd {CHECKOUT} && scripts/setup.sh --frameworks pytorch,{framework}", 300)
    debian13["record"].setdefault("refusals", {})[framework] = {
        "exit": refused.returncode, "output": refused.stdout + refused.stderr}
    assert refused.returncode == 2, tail(refused)
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"setup.sh: error: {framework} needs Python 3.11")


@pytest.mark.parametrize("framework", list(TRAINERS))
@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_two_ranks_train_on_debian13(debian13, framework, controller):
    if debian13["setup"].returncode != 0:
        pytest.skip("setup failed (test_setup_sets_up_pytorch_and_tensorflow_on_python_3_13 "
                    "says how)")
    log_dir = f"{USER_DIR}/runs/{framework}-{controller}"
    command = (f"cd {CHECKOUT} && .venv/bin/horovodrun -np 2 -H localhost:2 --{controller} "
               f".venv/bin/python {TRAINERS[framework]} --data-dir {DATA} "
               f"--no-download --epochs 3 --no-progress --log-dir {log_dir}")
    started = time.monotonic()
    run = in_tree(debian13["root"], command, timeout=900)
    seconds = time.monotonic() - started
    summary_file = debian13["root"] / log_dir.lstrip("/") / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    debian13["record"]["runs"][f"{framework}-{controller}"] = {
        "command": command.split("&& ", 1)[1], "exit": run.returncode,
        "seconds": round(seconds, 1), "test_accuracy": summary.get("test_accuracy"),
        "weights_identical": summary.get("weights_identical"),
        "images_per_sec": summary.get("images_per_sec"),
        **({} if run.returncode == 0 else {"tail": tail(run).splitlines()})}
    assert run.returncode == 0, tail(run)
    assert summary["size"] == 2 and summary["controller"] == controller
    assert summary["weights_identical"] is True
    assert summary["test_accuracy"] >= 0.95, summary["test_accuracy"]

