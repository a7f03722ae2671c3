"""The driver check through its own inputs, on a machine without a GPU: a
driver library compiled here answers cuDriverGetVersion and NVML's driver
version, as the NVIDIA runtime's mounted libcuda.so.1 and libnvidia-ml.so.1
do, and the image's check (docker/env/check_driver.py, the entrypoint's
first step) and the trainer's (horovod_train/torch/gpu.py) load it through
ctypes and give their one line, or nothing. The image's entrypoint runs it
in the built image too (test_image_cluster.py)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import DRIVER_SOURCE, REPO

CHECK = REPO / "docker" / "env" / "check_driver.py"


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory):
    """libcuda.so.1 and libnvidia-ml.so.1, one library under both names."""
    where = tmp_path_factory.mktemp("driver")
    (where / "driver.c").write_text(DRIVER_SOURCE)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(where / "libcuda.so.1"),
                    str(where / "driver.c")], check=True, timeout=60)
    (where / "libnvidia-ml.so.1").symlink_to("libcuda.so.1")
    return where


def with_driver(driver_dir, cuda: int, release: str) -> dict:
    return {**os.environ, "LD_LIBRARY_PATH": str(driver_dir), "DRIVER_CUDA": str(cuda),
            "DRIVER_RELEASE": release}


@pytest.mark.parallel
@pytest.mark.parametrize("cuda, needed, refused", [
    (12020, "13.0", True),   # an R535 driver under the CUDA 13 image
    (13000, "13.0", False),
    (12020, "12.8", False),  # the same major: minor version compatibility
])
def test_the_images_check_reads_the_driver_and_the_build_record(driver_dir, tmp_path, cuda,
                                                               needed, refused):
    record = tmp_path / "horovod-build.json"
    record.write_text(json.dumps({"gpu_ops": "nccl", "cuda": needed}))
    result = subprocess.run([sys.executable, str(CHECK), "--record", str(record)],
                            env=with_driver(driver_dir, cuda, "535.104.05"), capture_output=True,
                            text=True, timeout=60)
    if not refused:
        assert (result.returncode, result.stderr) == (0, "")
        return
    assert result.returncode == 2
    assert result.stderr == (
        "entrypoint: error: the NVIDIA driver 535.104.05 supports CUDA up to 12.2, and this "
        "image is built for CUDA 13.0 (driver 580.65.06 or newer): build the CUDA 12 "
        "image for it (docker build --build-arg CUDA=12 docker/), update the driver (on "
        "data-centre GPUs NVIDIA's cuda-compat package also serves), or run the CPU image "
        "(docker build --build-arg DEVICE=cpu docker/)\n")


@pytest.mark.parallel
def test_the_images_check_passes_a_build_without_cuda_and_a_host_without_a_driver(
        driver_dir, tmp_path):
    record = tmp_path / "horovod-build.json"
    record.write_text(json.dumps({"gpu_ops": "none", "cuda": None}))  # the CPU image
    for env in (with_driver(driver_dir, 11080, "470.0"), dict(os.environ)):
        result = subprocess.run([sys.executable, str(CHECK), "--record", str(record)], env=env,
                                capture_output=True, text=True, timeout=60)
        assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parallel
def test_the_trainers_check_reads_the_same_driver(driver_dir):
    """The trainer's check against this environment's torch (a CUDA 13
    build), under a newer driver and then an R535 one: one process, as torch
    is slow to import (the stand-in reads its answer at each call)."""
    code = ("import os, torch\n"
            "from horovod_train.torch import gpu\n"
            "from horovod_train.core.errors import run_main\n"
            "gpu.check_driver(torch)\n"
            "print('runs', flush=True)\n"
            "os.environ['DRIVER_CUDA'] = '12020'\n"
            "run_main(lambda: gpu.check_driver(torch), prog='trainer')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                            env=with_driver(driver_dir, 13010, "580.95.05"),
                            capture_output=True, text=True, timeout=120)
    assert result.stdout == "runs\n", result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("trainer: error: the NVIDIA driver")
    assert "supports CUDA up to 12.2, and this build of torch and Horovod needs CUDA 13.2" \
        in result.stderr
