"""The CUDA 12 tier: the GPU image for drivers before R580
(`docker build --build-arg CUDA=12 docker/`), built and checked for real.
Not in the default run (pyproject.toml's norecursedirs leaves tests/cuda12
out: the build downloads and compiles for tens of minutes, and the image
takes 7 GB more); start it with `scripts/test.sh tests/cuda12` (root,
PyPI and Debian's archive reachable). It builds the image with
scripts/build_image.sh --device gpu --cuda 12 unless it is there.

What it checks: the variant's lock resolves torch 2.10 and TensorFlow's
GPU wheel on its own pins; the image's Horovod has NCCL for PyTorch and
TensorFlow, links CUDA 12's runtime and NCCL from torch's wheels, and holds
native code for torch's architectures up to sm_90 with sm_90's PTX for
later GPUs; its TensorFlow is the CUDA 12 build; its entrypoint lets a CUDA
12.2 driver (R535) through and names an 11.8 one; the two-host command
trains in it over Gloo and MPI, PyTorch and TensorFlow (CPU tensors, with
--no-cuda: there is no GPU here), and without --no-cuda the trainers say
in one line that this NCCL build has no GPU to use. What was seen is written
to runs/cuda12/cuda12-image.json (a committed copy in benchmarks/results/)."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DRIVER_SOURCE, REPO, Run, assert_trained, image_hosts, on_host, run_on
from packaging.markers import Marker

from benchmarks.machine import machine_record

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(5400)]

IMAGE = "localhost/horovod-train:gpu-cuda12"
RECORD = REPO / "runs" / "cuda12" / "cuda12-image.json"
SITE = "/opt/venv/lib/python3.11/site-packages"
CUOBJDUMP = f"{SITE}/triton/backends/nvidia/bin/cuobjdump"
SEEN: dict = {}


@pytest.fixture(scope="module")
def built() -> str:
    if subprocess.run(["podman", "image", "exists", IMAGE]).returncode != 0:
        started = time.monotonic()
        subprocess.run([str(REPO / "scripts" / "build_image.sh"), "--device", "gpu",
                        "--cuda", "12"], check=True, timeout=5000)
        SEEN["build_s"] = round(time.monotonic() - started)
    size = subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", IMAGE],
                          capture_output=True, text=True, check=True).stdout
    SEEN["image_gb"] = round(int(size) / 1e9, 2)
    yield IMAGE
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps({"machine": machine_record(), **SEEN}, indent=2) + "\n")


@pytest.fixture(scope="module")
def hosts(built, emulated, image_mounts) -> dict:
    return image_hosts(emulated, built, image_mounts)


def test_the_variants_lock_resolves_torch_on_its_own_pins(tmp_path):
    """torch 2.10's requirements are met by the variant's pins, each package
    at its pinned version, its CUDA libraries CUDA 12's."""
    lock = tmp_path / "constraints-cuda12.txt"
    lock.write_text(subprocess.run([sys.executable, str(REPO / "docker" / "env" / "lock.py"),
                                    "--cuda", "12"], capture_output=True, text=True,
                                   check=True).stdout)
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", str(report), "-c", str(lock),
         "-r", str(REPO / "docker" / "env" / "requirements" / "pytorch.txt"),
         "-r", str(REPO / "docker" / "env" / "requirements" / "tensorflow-gpu.txt")],
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    resolved = {item["metadata"]["name"]: item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    norm = {}  # the pins that apply to this Python, by normalised name
    for line in lock.read_text().splitlines():
        pin, _, marker = line.split("#")[0].partition(";")
        if "==" in pin and (not marker.strip() or Marker(marker.strip()).evaluate()):
            name, version = pin.strip().split("==")
            norm[re.sub(r"[-_.]+", "-", name).lower()] = version
    assert {name: version for name, version in resolved.items()
            if norm.get(re.sub(r"[-_.]+", "-", name).lower()) != version} == {}
    assert resolved["torch"] == "2.10.0" and "tensorflow" in resolved
    assert "tensorflow-cpu" not in resolved
    assert not [name for name in resolved if name.startswith("nvidia-") and "cu12" not in name]


def test_the_images_horovod_is_an_nccl_build_on_cuda_12(hosts):
    report = run_on("a", "horovodrun", "--check-build", timeout=120).stdout
    for line in ("[X] PyTorch", "[X] TensorFlow", "[X] MPI", "[X] Gloo", "[X] NCCL"):
        assert line in report, report
    record = json.loads(run_on("a", "cat", "/opt/venv/horovod-build.json").stdout)
    assert record["cuda"] == "12.8" and record["nccl"] == "2.27.5"
    assert record["cuda_toolkit"] == "nvidia-cuda-toolkit 12.4.131 (Debian)"
    check = run_on("a", "/opt/horovod-env/build_horovod.sh", "--python", "/opt/venv/bin/python",
                   "--check-only", timeout=180)
    assert check.returncode == 0, check.stdout + check.stderr
    ldd = run_on("a", "sh", "-c", f"ldd {SITE}/horovod/torch/mpi_lib_v2*.so").stdout
    assert re.search(rf"libcudart\.so\.12 => {SITE}/\S+/nvidia/cuda_runtime/lib/", ldd), ldd
    assert re.search(rf"libnccl\.so\.2 => {SITE}/\S+/nvidia/nccl/lib/", ldd), ldd
    assert "cu13" not in ldd and "libcudart.so.13" not in ldd
    tf_ldd = run_on("a", "sh", "-c", f"ldd {SITE}/horovod/tensorflow/mpi_lib*.so").stdout
    assert re.search(rf"libnccl\.so\.2 => {SITE}/\S+/nvidia/nccl/lib/", tf_ldd), tf_ldd
    assert re.search(rf"libtensorflow_framework\.so\.2 => {SITE}/\S+/tensorflow/", tf_ldd), tf_ldd
    said = run_on("a", "python", "-c", "import json, tensorflow as tf; "
                  "print(json.dumps(dict(tf.sysconfig.get_build_info())))", timeout=180)
    tf_build = json.loads(said.stdout.splitlines()[-1])
    assert tf_build["is_cuda_build"] and tf_build["cuda_version"].startswith("12."), tf_build
    assert record["frameworks"].keys() == {"pytorch", "tensorflow"}
    listing = run_on("a", "sh", "-c", f"{CUOBJDUMP} --list-elf --list-ptx "
                     f"{SITE}/horovod/torch/mpi_lib_v2*.so", timeout=120)
    native = re.findall(r"^ELF file\s+\d+: \S+\.sm_(\d+)\.cubin$", listing.stdout, flags=re.M)
    ptx = re.findall(r"^PTX file\s+\d+: \S+\.sm_(\d+)\.ptx$", listing.stdout, flags=re.M)
    torch_archs = run_on("a", "python", "-c", "import torch; print(torch._C._cuda_getArchFlags())",
                         timeout=120).stdout.split()
    wanted = sorted({a.removeprefix("sm_") for a in torch_archs if a.startswith("sm_")
                     and int(a.removeprefix("sm_")) <= 90}, key=int)
    assert sorted(set(native), key=int) == wanted and ptx == [wanted[-1]], listing.stdout
    SEEN.update(check_build=[line.strip() for line in report.splitlines() if "[X]" in line],
                torch=run_on("a", "python", "-c", "import torch; print(torch.__version__)",
                             timeout=120).stdout.strip(),
                record={k: record[k] for k in ("cuda", "cuda_toolkit", "cuda_archs", "nccl",
                                               "compiler")},
                torch_archs=torch_archs, native_archs=sorted(set(native), key=int), ptx=ptx,
                tensorflow={k: tf_build[k] for k in ("cuda_version", "cudnn_version")})


def test_the_entrypoint_takes_a_cuda_12_driver_and_names_an_older_one(hosts):
    build = ("mkdir -p /tmp/driver && cat > /tmp/driver/driver.c && cd /tmp/driver && "
             "cc -shared -fPIC -o libcuda.so.1 driver.c && ln -sf libcuda.so.1 libnvidia-ml.so.1")
    subprocess.run(on_host("a", ["sh", "-c", build]), input=DRIVER_SOURCE, text=True,
                   check=True, capture_output=True, timeout=120)
    check = ["env", "LD_LIBRARY_PATH=/tmp/driver", "python", "/opt/horovod-env/check_driver.py"]
    r535 = run_on("a", *check[:2], "DRIVER_CUDA=12020", "DRIVER_RELEASE=535.104.05", *check[2:])
    assert (r535.returncode, r535.stderr) == (0, "")
    r470 = run_on("a", *check[:2], "DRIVER_CUDA=11040", "DRIVER_RELEASE=470.256.02", *check[2:])
    assert r470.returncode == 2
    assert r470.stderr.startswith("entrypoint: error: the NVIDIA driver 470.256.02 supports "
                                  "CUDA up to 11.4, and this image is built for CUDA 12.8 "
                                  "(driver 525.60.13 or newer)"), r470.stderr
    SEEN["driver_lines"] = {"535.104.05 (CUDA 12.2)": "runs", "470.256.02 (CUDA 11.4)":
                            r470.stderr.strip()}


@pytest.mark.parametrize("trainer", ["pytorch_mnist.py", "tensorflow2_mnist.py"])
def test_without_gpus_the_nccl_build_is_one_line_unless_no_cuda(hosts, trainer):
    result = run_on("a", "horovodrun", "-np", "1", "-H", "a:1", "python",
                    f"horovod_train/{trainer}", "--no-download", "--epochs", "1", timeout=300)
    lines = [line.split(">:", 1)[-1] for line in result.stderr.splitlines()
             if f"{trainer}: error:" in line]
    assert result.returncode != 0 and lines == [
        f"{trainer}: error: this Horovod is built for GPUs (NCCL), and host a has none to use "
        "(no NVIDIA driver is loaded; CUDA_VISIBLE_DEVICES unset): give it its GPUs (docker run "
        "--gpus, docker/compose.gpu.yaml, srun --gpus-per-task), or train on the CPU with "
        "--no-cuda"], result.stdout + result.stderr


@pytest.mark.parametrize(("controller", "trainer"), [
    ("mpi", "pytorch_mnist.py"), ("gloo", "pytorch_mnist.py"), ("mpi", "tensorflow2_mnist.py")])
def test_the_two_host_command_trains_in_it(hosts, image_mounts, controller, trainer):
    name = f"cuda12-{controller}-{trainer.split('_')[0]}"
    command = ["horovodrun", "-np", "4", "-H", "a:2,b:2", "python",
               f"horovod_train/{trainer}", "--data-dir", "/data", "--no-download",
               "--epochs", "2", "--no-progress", "--no-cuda", "--log-dir", f"/runs/{name}"]
    if controller == "gloo":
        command.insert(1, "--gloo")
    started = time.monotonic()
    result = run_on("a", *command, timeout=900)
    run = Run(result.returncode, result.stdout + result.stderr, image_mounts["runs"] / name)
    assert_trained(run, 4, controller, {"a": 2, "b": 2})
    summary = json.loads((Path(image_mounts["runs"]) / name / "summary.json").read_text())
    SEEN.setdefault("runs", {})[f"{trainer} {controller}"] = {
        "wall_s": round(time.monotonic() - started, 1), "exit": result.returncode,
        "test_accuracy": summary.get("test_accuracy"),
        "weights_identical": summary.get("weights_identical")}
