"""The training image, both variants, as scripts/test.sh builds them with
podman from docker/ as the context (`docker build docker/`): Horovod with
NCCL (gpu), its CUDA kernels for every architecture torch has and the RDMA
stack NCCL loads, or with all three frameworks (cpu), every library it
links resolvable, no CUDA library twice, no private key in any layer; and
the two-host command run inside each, on hosts that are containers of the
image (its entrypoint, its sshd, keys from scripts/cluster_keys.sh, the
checkout mounted at /workspace), and in the image that carries the code,
with nothing mounted. Bad build arguments fail early with one line."""

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import (
    DRIVER_SOURCE,
    IMAGES,
    REPO,
    Run,
    assert_trained,
    image_hosts,
    interface_renamed,
    on_host,
    require_image,
    run_on,
)

from horovod_train.emulation.cluster import STATE_DIR

CONTEXT = REPO / "docker"

EXPECTED = {  # what --check-build must show in each variant
    "gpu": ("[X] PyTorch", "[X] MPI", "[X] Gloo", "[X] NCCL"),
    "cpu": ("[X] TensorFlow", "[X] PyTorch", "[X] MXNet", "[X] MPI", "[X] Gloo"),
}


@pytest.fixture(scope="module", params=["gpu", "cpu"])
def variant(request) -> str:
    require_image(request.param)
    return request.param


@pytest.fixture
def hosts(variant, emulated, image_mounts) -> dict:
    return image_hosts(emulated, IMAGES[variant], image_mounts)


@pytest.mark.cluster
def test_horovods_build_every_library_it_links_and_mpi4py(variant, hosts):
    """The recipe's check in the image: horovodrun --check-build's report
    shows the variant's frameworks and operations, and ldd on each of
    Horovod's libraries finds everything but the driver's libcuda.so.1,
    which the host's NVIDIA runtime provides; mpi4py runs on the image's
    Open MPI."""
    check = run_on("a", "/opt/horovod-env/build_horovod.sh", "--python", "/opt/venv/bin/python",
                   "--check-only", timeout=180)
    assert check.returncode == 0, check.stdout + check.stderr
    for line in EXPECTED[variant]:
        assert line in check.stdout, check.stdout
    if variant == "cpu":
        assert "[ ] NCCL" in check.stdout, check.stdout
    assert "Every library Horovod links resolves" in check.stdout
    mpi4py = run_on("a", "python", "-c", "from mpi4py import MPI; print(MPI.Get_library_version())",
                    timeout=120)
    assert "Open MPI" in mpi4py.stdout, mpi4py.stderr
    if variant == "gpu":
        ldd = run_on("a", "sh", "-c", "ldd /opt/venv/lib/python3.11/site-packages/horovod/torch/"
                     "mpi_lib_v2*.so", timeout=60).stdout
        assert re.search(r"libnccl\.so\.2 => /opt/venv/\S+/nvidia/nccl/lib/", ldd), ldd
        assert re.search(r"libcudart\.so\.13 => /opt/venv/\S+/nvidia/cu13/lib/", ldd), ldd


@pytest.mark.cluster
def test_the_gpu_image_says_so_itself_when_the_driver_or_the_gpus_are_missing(variant, hosts):
    """No NVIDIA_REQUIRE_CUDA for the runtime to refuse by: the entrypoint
    checks the driver first (here a stand-in driver library of CUDA 12.2,
    test_driver_check_run.py's, compiled in the container) and stops in one
    line; and the image's NCCL build, given no GPU, refuses to train on the
    CPU unless asked (--no-cuda, as the image's other tests ask)."""
    if variant != "gpu":
        pytest.skip("the CPU image has no CUDA to check")
    build = ("mkdir -p /tmp/driver && cat > /tmp/driver/driver.c && cd /tmp/driver && "
             "cc -shared -fPIC -o libcuda.so.1 driver.c && ln -sf libcuda.so.1 libnvidia-ml.so.1")
    subprocess.run(on_host("a", ["sh", "-c", build]), input=DRIVER_SOURCE, text=True,
                   check=True, capture_output=True, timeout=120)
    refused = run_on("a", "env", "LD_LIBRARY_PATH=/tmp/driver", "DRIVER_CUDA=12020",
                     "DRIVER_RELEASE=535.104.05", "/usr/local/bin/entrypoint.sh", "echo", "started")
    assert refused.returncode == 2 and "started" not in refused.stdout, refused.stdout
    assert refused.stderr.startswith("entrypoint: error: the NVIDIA driver 535.104.05 supports "
                                     "CUDA up to 12.2, and this image is built for CUDA 13.2 "
                                     "(driver 580.65.06 or newer)"), refused.stderr
    assert "NVIDIA_REQUIRE_CUDA" not in run_on("a", "env").stdout
    no_gpu = run_on("a", "python", "horovod_train/pytorch_mnist.py", "--data-dir", "/data",
                    "--no-download", "--epochs", "1", timeout=120)
    assert no_gpu.returncode == 2, no_gpu.stdout[-2000:] + no_gpu.stderr[-2000:]
    assert no_gpu.stderr.strip() == (
        "pytorch_mnist.py: error: this Horovod is built for GPUs (NCCL), and host a has none to "
        "use (no NVIDIA driver is loaded; CUDA_VISIBLE_DEVICES unset): give it its GPUs "
        "(docker run --gpus, docker/compose.gpu.yaml, srun --gpus-per-task), or train on the "
        "CPU with --no-cuda"), no_gpu.stderr


# Triton (torch's kernel compiler) ships two CUPTI builds of its own, for
# its profiler only (CUDA 12 and 13 sonames): kept as its wheel ships them.
TRITON_PROFILER_CUPTI = "/site-packages/triton/backends/nvidia/lib/cupti"


@pytest.mark.cluster
def test_no_cuda_library_twice(variant, hosts):
    """The CUDA libraries come from the lock's wheels alone: no base image,
    toolkit or second wheel brings another copy of any of them."""
    found = run_on("a", "find", "/", "-xdev", "-type", "f", "(", "-name", "libcu*.so*", "-o",
                   "-name", "libnccl*.so*", "-o", "-name", "libnv*.so*", ")", timeout=180)
    paths = [p for p in found.stdout.splitlines() if TRITON_PROFILER_CUPTI not in p]
    names = [path.rsplit("/", 1)[-1].split(".so")[0] for path in paths]
    assert "libcudart" in names  # torch's CUDA wheels are in both variants
    twice = {name: n for name, n in Counter(names).items() if n > 1}
    assert twice == {}, found.stdout


@pytest.mark.cluster
def test_compiler_was_the_pinned_one(variant, hosts):
    record = json.loads(run_on("a", "cat", "/opt/venv/horovod-build.json", timeout=120).stdout)
    assert re.search(r"\) 12\.\d+\.\d+$", record["compiler"]), record["compiler"]
    assert record["gpu_ops"] == ("nccl" if variant == "gpu" else "none")
    if variant == "gpu":
        assert record["cuda_archs"] == ",".join(torch_archs())


def torch_archs() -> list[str]:
    """The compute capabilities the image's torch has native code for."""
    listed = run_on("a", "python", "-c", "import torch; print(*torch.cuda.get_arch_list())",
                    timeout=120).stdout.split()
    return [arch.removeprefix("sm_") for arch in listed if arch.startswith("sm_")]


CUOBJDUMP = "/opt/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/cuobjdump"


@pytest.mark.cluster
def test_horovods_gpu_kernels_cover_every_architecture_torch_has(variant, hosts):
    """What Horovod's CUDA library in the GPU image holds (cuobjdump, from
    torch's Triton wheel): native code for each architecture of torch's own
    list, and PTX of the newest, which the driver compiles for later GPUs."""
    if variant != "gpu":
        pytest.skip("the CPU image has no CUDA kernels")
    library = "/opt/venv/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2*.so"
    listing = run_on("a", "sh", "-c", f"{CUOBJDUMP} --list-elf --list-ptx {library}",
                     timeout=120)
    assert listing.returncode == 0, listing.stderr
    native = re.findall(r"^ELF file\s+\d+: \S+\.sm_(\d+)\.cubin$", listing.stdout, flags=re.M)
    ptx = re.findall(r"^PTX file\s+\d+: \S+\.sm_(\d+)\.ptx$", listing.stdout, flags=re.M)
    wanted = torch_archs()
    assert len(wanted) >= 2, wanted
    assert sorted(native, key=int) == sorted(wanted, key=int), listing.stdout
    assert ptx == [max(wanted, key=int)], listing.stdout


NCCL_LIBRARY = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"

LOADS = ("import ctypes, sys\n"
         "for name in sys.argv[1:]:\n"
         "    try:\n"
         "        ctypes.CDLL(name)\n"
         "        print(name, 'loads')\n"
         "    except OSError as err:\n"
         "        print(name, err)\n")


@pytest.mark.cluster
def test_the_gpu_image_carries_the_rdma_stack_nccl_and_open_mpi_load(variant, hosts):
    """The libraries NCCL's InfiniBand/RoCE transport opens (their names read
    from NCCL's own library) load in the image, Open MPI's RDMA components
    open, and the tools to check a device run; this machine has no RDMA
    device (nor the kernel's verbs), so they find none."""
    if variant != "gpu":
        pytest.skip("the RDMA stack is for NCCL, in the GPU image")
    strings = run_on("a", "strings", NCCL_LIBRARY, timeout=120)
    opened = sorted(set(re.findall(r"^(lib(?:ibverbs|mlx5)\.so(?:\.\d+)?)$", strings.stdout,
                                   flags=re.M)))
    assert "libibverbs.so.1" in opened and "libmlx5.so.1" in opened, opened
    loads = run_on("a", "python", "-c", LOADS, *opened, "librdmacm.so.1", timeout=120)
    for name in ("libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"):
        assert f"{name} loads" in loads.stdout.splitlines(), loads.stdout + loads.stderr
    components = run_on("a", "ompi_info", timeout=120).stdout
    assert re.search(r"MCA pml: ucx\b", components) and re.search(r"MCA btl: openib\b",
                                                                     components), components
    devices = run_on("a", "ibv_devices", timeout=60)
    assert devices.returncode in (0, 1), devices.stderr
    assert "IB devices list" in devices.stderr or "device" in devices.stdout
    assert run_on("a", "ibstat", "-l", timeout=60).stdout == ""  # no adapter here
    tools = run_on("a", "sh", "-c",
                   "for t in ibv_devinfo ib_write_bw rping; do command -v $t; done", timeout=60)
    assert len(tools.stdout.split()) == 3, tools.stdout


HOROVOD_TORCH_LIB = "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so"
SITE_PACKAGES = Path(importlib.util.find_spec("horovod").origin).parent.parent  # this venv's


@pytest.mark.cluster
def test_the_cpu_images_horovod_is_the_wheel_the_emulated_hosts_train_with(variant, hosts):
    """scripts/test.sh builds the CPU image's Horovod from the checkout's
    wheel cache: the same build, so its Gloo path is the one every
    emulated-host test runs."""
    if variant != "cpu":
        pytest.skip("the GPU image's Horovod is its own build (NCCL)")
    in_image = run_on("a", "sha256sum",
                      f"/opt/venv/lib/python3.11/site-packages/{HOROVOD_TORCH_LIB}")
    assert in_image.returncode == 0, in_image.stderr
    here = hashlib.sha256((SITE_PACKAGES / HOROVOD_TORCH_LIB).read_bytes()).hexdigest()
    assert in_image.stdout.split()[0] == here


SKIPPED_RUNS = {
    ("gpu", "mpi"): "run by the code image's test, on the GPU image's layers",
    ("cpu", "gloo"): "the CPU image's Horovod is the wheel the emulated hosts run over Gloo",
}


# Two ranks' allreduce of 1 MiB each, above Open MPI's eager limit: the
# transfer its shared-memory transport makes with a single copy, if it may.
# Each rank says its line in one write: print's pieces of two ranks interleave.
ALLREDUCE_1MIB = ("import array, os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
                  "out = array.array('d', bytes(1 << 20)); "
                  "c.Allreduce(array.array('d', [c.rank] * (1 << 17)), out); "
                  "os.write(1, f'rank {c.rank} sum {out[0]}\\n'.encode())")


@pytest.mark.cluster
def test_two_ranks_in_one_container_under_the_runtimes_default_seccomp_print_no_errors(
        image_cluster):
    """docker run and podman run apply a seccomp profile that refuses
    process_vm_readv (tests/seccomp_default.py applies that rule, the
    kernel's own filter): the image turns Open MPI's single copy off, so two
    ranks of a container exchange large messages without its "Read -1"
    lines; with the single copy on again, they appear."""
    command = ["python", "/workspace/tests/seccomp_default.py", "mpirun", "--allow-run-as-root",
               "-np", "2", "--mca", "btl", "self,vader", "python", "-c", ALLREDUCE_1MIB]
    clean = run_on("a", *command, timeout=120)
    output = clean.stdout + clean.stderr
    assert clean.returncode == 0, output
    assert sorted(re.findall(r"rank (\d) sum 1\.0", output)) == ["0", "1"], output
    assert "Read -1" not in output, output
    single_copy = run_on("a", "env", "OMPI_MCA_btl_vader_single_copy_mechanism=cma", *command,
                         timeout=120)
    said = single_copy.stdout + single_copy.stderr
    assert re.search(r"Read -1, expected \d+, errno = 1", said), said


@pytest.mark.cluster
def test_ssh_between_containers_takes_the_clusters_host_key_and_no_other(image_cluster):
    """Every container answers with the cluster's host key (from
    scripts/cluster_keys.sh), which a's known_hosts names for b before any
    connection, StrictHostKeyChecking yes; an sshd on b with a key of its
    own, looked up under b's name and port, is refused before any login."""
    config = run_on("a", "cat", "/run/hvt-ssh/config").stdout
    assert "StrictHostKeyChecking yes" in config, config
    assert run_on("a", "ssh", "b", "true").returncode == 0
    cluster_key = (STATE_DIR / "keys" / "ssh_host_ed25519_key.pub").read_text().split()[1]
    served = run_on("b", "cat", "/run/hvt-ssh/ssh_host_key").stdout
    assert served == (STATE_DIR / "keys" / "ssh_host_ed25519_key").read_text()
    assert cluster_key in run_on("a", "cat", "/run/hvt-ssh/known_hosts").stdout
    started = run_on("b", "sh", "-c",
                     "ssh-keygen -q -t ed25519 -N '' -f /tmp/other_host_key && "
                     "/usr/sbin/sshd -p 2222 -h /tmp/other_host_key -o PidFile=/tmp/other.pid")
    assert started.returncode == 0, started.stderr
    try:
        spoofed = run_on("a", "ssh", "-p", "2222", "-o", "HostKeyAlias=[b]:12345", "b", "true")
    finally:
        run_on("b", "sh", "-c", "kill $(cat /tmp/other.pid); rm -f /tmp/other_host_key*")
    assert spoofed.returncode == 255, spoofed.stderr
    assert "Host key verification failed." in spoofed.stderr, spoofed.stderr


USERS_SSH_FILES = ("config", "id_ed25519", "known_hosts", "authorized_keys")


@pytest.mark.cluster
def test_the_entrypoint_leaves_a_home_that_holds_the_users_own_ssh_files(image_cluster):
    """Apptainer may bind the user's home into the container: the
    entrypoint, run again on b with the user's own ssh files there, leaves
    each byte of them and keeps its own files in /run/hvt-ssh."""
    users = "".join(f"the user's {name}\n" for name in USERS_SSH_FILES)
    run_on("b", "sh", "-c", "mkdir -p ~/.ssh && for f in " + " ".join(USERS_SSH_FILES)
           + "; do echo \"the user's $f\" > ~/.ssh/$f; done")
    try:
        # A second sshd, on a port of its own, logging to a file: the first
        # one keeps serving the cluster.
        again = run_on("b", "sh", "-c", "HVT_SSH_PORT=2223 /usr/local/bin/entrypoint.sh "
                       "echo started > /tmp/entrypoint.log 2>&1; cat /tmp/entrypoint.log")
        assert again.returncode == 0 and "started\n" in again.stdout, again
        kept = run_on("b", "sh", "-c", "cd ~/.ssh && cat " + " ".join(USERS_SSH_FILES))
        assert kept.stdout == users
        assert run_on("b", "ls", "/run/hvt-ssh").stdout.split() == [
            "authorized_keys", "config", "id_ed25519", "known_hosts", "ssh_host_key"]
    finally:
        run_on("b", "sh", "-c", "pkill -f '[-]p 2223 -h'; rm -rf ~/.ssh")
        entrypoint_again("b")


def entrypoint_again(host: str, *variables: str) -> tuple[int, str]:
    """The image's entrypoint run once more on `host` with these settings,
    then `true`: its files in /run/hvt-ssh are rewritten, its sshd stays.
    Its exit code and output, through a file: the sshd it starts keeps
    its output open."""
    ran = run_on(host, "sh", "-c", f"env {' '.join(variables)} /usr/local/bin/entrypoint.sh "
                 "true > /tmp/entrypoint.log 2>&1; echo $?; cat /tmp/entrypoint.log")
    code, _, output = ran.stdout.partition("\n")
    return int(code), output


def processes_of(host: str, name: str) -> list[str]:
    """The user of each process of that name on the host."""
    listing = run_on(host, "sh", "-c", "for p in /proc/[0-9]*; do "
                     f"[ \"$(cat $p/comm 2>/dev/null)\" = {name} ] && stat -c %U $p; done; true")
    return listing.stdout.split()


@pytest.mark.cluster
def test_the_image_runs_as_its_user_and_takes_the_operators_per_job_key(image_cluster):
    """The containers run as the image's unprivileged user: its sshd, the
    commands, the ssh logins. Keys it cannot read are one line, exit 2. The
    Kubeflow MPI Operator's per-job key (an ECDSA key in PEM, as the
    operator writes it) serves as user key and host key: an sshd of b
    started with it is reached, its host key checked against the job's."""
    assert run_on("a", "id", "-un").stdout.strip() == "hvt"
    assert set(processes_of("b", "sshd")) == {"hvt"}
    b_root = STATE_DIR / "hosts" / "b" / "root"
    roots = b_root / "tmp" / "roots-keys"
    operator = b_root / "tmp" / "operator-keys"
    for keys in (roots, operator):
        keys.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(roots / "ssh_host_ed25519_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "",
                    "-f", str(operator / "id_rsa")], check=True)
    (operator / "authorized_keys").write_text((operator / "id_rsa.pub").read_text())
    for path in [operator, *operator.iterdir()]:
        os.chown(path, 1000, 1000)
    try:
        code, said = entrypoint_again("b", "HVT_KEYS_DIR=/tmp/roots-keys", "HVT_SSH_PORT=2224")
        assert code == 2 and said.strip() == (
            "entrypoint: error: cannot read /tmp/roots-keys/ssh_host_ed25519_key as hvt "
            "(uid 1000): make the keys readable by this uid (chown 1000 on the host) or run "
            "the container as their owner"), said
        code, said = entrypoint_again("b", "HVT_KEYS_DIR=/tmp/operator-keys", "HVT_SSH_PORT=2224",
                                      "HVT_CLUSTER_HOSTS=b")
        assert code == 0, said
        served = run_on("b", "cat", "/run/hvt-ssh/ssh_host_key").stdout
        assert served == (operator / "id_rsa").read_text() and "EC PRIVATE KEY" in served
        job_key = (operator / "id_rsa.pub").read_text().split()[1]
        assert job_key in run_on("b", "ssh-keygen", "-F", "[b]:2224", "-f",
                                 "/run/hvt-ssh/known_hosts").stdout
        reached = run_on("b", "ssh", "b", "id", "-un")
        assert reached.returncode == 0 and reached.stdout == "hvt\n", reached.stderr
    finally:
        run_on("b", "sh", "-c", "pkill -f '[-]p 2224 -h'")
        entrypoint_again("b")  # the cluster's keys and port again (its sshd still listens)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("controller", ["mpi", "gloo"])
def test_two_host_command_inside_the_image(variant, hosts, image_mounts, controller):
    """The command as users type it, in the image's working directory (the
    mounted checkout), over MPI and Gloo: the GPU image's NCCL build of
    Horovod trains CPU tensors too. Each Horovod build runs over both: the
    GPU image's over Gloo here and over MPI, the command exactly as written,
    in the code image's test below (the same image with the code in it);
    the CPU image's, the very wheel the emulated hosts' tests run over Gloo,
    over MPI here."""
    if (variant, controller) in SKIPPED_RUNS:
        pytest.skip(SKIPPED_RUNS[variant, controller])
    name = f"{variant}-{controller}"
    command = ["horovodrun", "-np", "4", "-H", "a:2,b:2", "-p", "12345", "python",
               "horovod_train/pytorch_mnist.py", "--data-dir", "/data", "--no-download",
               "--epochs", "1", "--no-progress",
               "--log-dir", f"/runs/{name}"]
    if variant == "gpu":
        command.append("--no-cuda")  # the NCCL build, on a host without GPUs
    if controller == "gloo":
        command.insert(1, "--gloo")
    result = run_on("a", *command, timeout=600)
    run = Run(result.returncode, result.stdout + result.stderr, image_mounts["runs"] / name)
    # For MPI no controller flag, as written: horovodrun picks MPI, since the
    # image's Horovod is built with it and its mpirun reaches the other host.
    # One epoch: 90% (the soak's bar for one).
    assert_trained(run, 4, controller, {"a": 2, "b": 2}, min_accuracy=0.9)
    # b's sshd says who came in, in the container's own output.
    container_log = (STATE_DIR / "hosts" / "b" / "container.log").read_text()
    assert "Accepted publickey for hvt from " in container_log, container_log[-2000:]


@pytest.mark.cluster
def test_a_users_script_runs_by_the_literal_horovodrun_in_the_image(variant, hosts,
                                                                    image_mounts):
    """Users' own scripts (tests/user_scripts/: PyTorch named as the trainer,
    a Keras fit with hvd.DistributedOptimizer on the image's Keras 3) from
    the mounted checkout, with their own options, across both containers by
    the literal horovodrun: nothing asks them for the trainer's options. The
    CPU image's runs stand for both images: the same horovodrun and sshd."""
    if variant != "cpu":
        pytest.skip("the CPU image's run stands for both images")
    for script in ("pytorch_mnist.py", "tensorflow2_keras_mnist.py"):
        out = f"/runs/{script.removesuffix('.py')}.json"
        command = ["horovodrun", "-np", "2", "-H", "a:1,b:1", "-p", "12345", "python",
                   f"tests/user_scripts/{script}", "--data-dir", "/data", "--epochs", "1",
                   "--out", out]
        result = run_on("a", *command, timeout=300)
        assert result.returncode == 0, script + result.stdout[-3000:] + result.stderr[-3000:]
        ran = json.loads((image_mounts["runs"] / Path(out).name).read_text())
        assert ran["size"] == 2 and ran["hosts"] == {"a": 1, "b": 1}, (script, ran)
        assert ran["same_weights"] is True and ran["argv"][-2:] == ["--out", out], script


# What the repository root's .dockerignore lets into the image's /workspace.
APP_FILES = {"README.md", "benchmarks", "docker", "horovod_train", "hostfiles", "pyproject.toml",
             "scripts", "runs"}


@pytest.mark.slow
@pytest.mark.cluster
def test_the_image_with_the_code_runs_the_two_host_command_with_nothing_mounted(
        app_image, emulated, small_mnist_dir):
    """Two containers of the image that carries the code (docker/app.Dockerfile),
    nothing mounted: the trainer is the image's. Each host gets the digits
    on its own disk, as a node that downloads them would (CI cannot). Host
    b calls its network ens5, a eth0: the image's Horovod hands over the
    network where no interface name is common."""
    emulated.ensure("--image", app_image)
    digits = subprocess.run(["tar", "-C", str(small_mnist_dir), "-c", "."], capture_output=True,
                            check=True).stdout
    for host in ("a", "b"):
        subprocess.run(on_host(host, ["sh", "-c", "mkdir -p /tmp/data && tar -x -C /tmp/data"]),
                       input=digits, capture_output=True, check=True, timeout=120)
    assert set(run_on("a", "ls", "-A", "/workspace").stdout.split()) == APP_FILES
    # The installed package, apart from the copy at /workspace that the image's
    # PYTHONPATH (and python -c's working directory) put first: from /, without it.
    installed = run_on("a", "sh", "-c", "cd / && env -u PYTHONPATH python -c "
                       "'import horovod_train; print(horovod_train.__file__)'")
    assert installed.stdout.startswith("/opt/venv/lib/python3.11/site-packages/horovod_train/")
    # The installed launcher carries Open MPI's settings (package data).
    settings = run_on("a", "sh", "-c", "cd / && env -u PYTHONPATH python -c 'from "
                      "horovod_train.launch import openmpi; "
                      "print(openmpi.project_environment())'")
    assert "OMPI_MCA_oob_tcp_keepalive_time" in settings.stdout, settings.stderr
    with interface_renamed("b", "eth0", "ens5"):
        # The preflight in the image, over the containers' sshd: the same
        # build on both, the network by its subnet, no checkout (the code is
        # the image's); --no-cuda as the trainer's (no GPUs here).
        checked = run_on("a", "python", "-m", "horovod_train", "preflight", "-H", "a:2,b:2",
                         "-p", "12345", "--no-cuda", timeout=300)
        assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
        assert "preflight: all well, 2 hosts checked in " in checked.stdout
        result = run_on("a", "horovodrun", "-np", "4", "-H", "a:2,b:2", "-p", "12345", "python",
                        "horovod_train/pytorch_mnist.py", "--data-dir", "/tmp/data",
                        "--no-download", "--epochs", "1", "--no-progress", "--log-dir",
                        "/tmp/run", "--no-cuda", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # The platform's network rule, which the image's Horovod asks: by subnet.
    assert " on a eth0, b ens5 (chosen)" in result.stdout.splitlines()[0], result.stdout[:500]
    summary = json.loads(run_on("a", "cat", "/tmp/run/summary.json").stdout)
    assert summary["size"] == 4 and summary["hosts"] == {"a": 2, "b": 2}
    assert summary["controller"] == "mpi"  # as written: horovodrun picks MPI
    assert summary["weights_identical"] is True


def test_the_image_with_the_code_adds_no_private_key(app_image):
    """The layers the code image adds to the GPU image's (which
    test_no_private_key_in_any_layer walks): nothing that holds a key, such
    as a cluster-keys directory left in the checkout."""
    added = [tree for tree in layer_trees(app_image) if tree not in layer_trees(IMAGES["gpu"])]
    assert added
    assert [name for tree in added for name in key_files(tree)] == []


KEY_NAME = re.compile(r"(^|/)(ssh_host_\w+_key|id_(rsa|ecdsa|ed25519|dsa))$")

CONFIG_DIRS = ("etc/", "root/", "home/", "workspace/")


def key_files(layer: Path) -> list[str]:
    """Files of one layer's tree that are, or hold, a private key."""
    found = []
    for folder, _, files in os.walk(layer):
        for name in files:
            path = Path(folder) / name
            relative = path.relative_to(layer).as_posix()
            small_config = (relative.startswith(CONFIG_DIRS) and path.is_file()
                            and not path.is_symlink() and path.stat().st_size < 20_000)
            if (KEY_NAME.search(relative) or relative.startswith("root/.ssh/")
                    or small_config and b"PRIVATE KEY-----" in path.read_bytes()):
                found.append(relative)
    return found


def layer_trees(image: str) -> list[Path]:
    """The directory of each of the image's layers in podman's overlay
    storage, its files as the layer holds them (what deletes a file in a
    later layer leaves it in its own)."""
    inspect = json.loads(subprocess.run(["podman", "image", "inspect", image],
                                        capture_output=True, text=True, check=True).stdout)[0]
    driver = inspect["GraphDriver"]
    assert driver["Name"] == "overlay", f"podman's storage is {driver['Name']}; overlay expected"
    lower = [Path(d) for d in driver["Data"].get("LowerDir", "").split(":") if d]
    trees = [*lower, Path(driver["Data"]["UpperDir"])]
    assert len(trees) == len(inspect["RootFS"]["Layers"])
    return trees


def test_no_private_key_in_any_layer(variant):
    """Every layer of the image, file by file: no SSH host key, no key pair,
    nothing that holds an OpenSSH private key."""
    trees = layer_trees(IMAGES[variant])
    assert len(trees) >= 2
    found = [f"{tree.parent.name[:12]}: {name}" for tree in trees for name in key_files(tree)]
    assert found == []


def podman_build(*build_args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The image with these arguments, on the base the images were built on,
    so the layers before the argument checks come from the cache."""
    args = ["BASE_IMAGE=localhost/debian-base:bookworm", *build_args]
    command = ["podman", "build", "--isolation", "chroot", "--layers", "--format", "docker",
               "--force-rm", "-t", "localhost/horovod-train:bad-args"]
    for arg in args:
        command += ["--build-arg", arg]
    started = time.monotonic()
    result = subprocess.run([*command, str(CONTEXT)], capture_output=True, text=True,
                            timeout=600)
    return result, time.monotonic() - started


# One argument of each check: the first stage's own (DEVICE), setup.sh's
# (CUDA; FRAMEWORKS and CUDA_ARCHS are setup.sh's rules too, each tested in
# test_build_horovod_run.py), and the main stage's first step (GCC_VERSION).
@pytest.mark.parametrize("build_arg, message", [
    ("DEVICE=tpu", "DEVICE=tpu: unknown; it takes gpu or cpu"),
    ("CUDA=11", "setup.sh: error: --cuda: '11'; it takes 13 or 12"),
    ("GCC_VERSION=99", "GCC_VERSION=99: no gcc-99 in the base image's packages"),
])
def test_bad_build_argument_fails_early_with_one_line(build_arg, message, gpu_image):
    result, seconds = podman_build(build_arg)
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if message in line]
    assert lines, result.stdout[-2000:] + result.stderr[-2000:]
    assert seconds < 180
