"""Setup's GPU operations follow the GPUs the environment is for, not the
machine it runs on (docker/env/setup.sh): --cuda asks for NCCL (a login
node without GPUs sets up for the compute nodes'), and a venv's CPU-only
choice is not kept without a word where GPUs are. Checked with
--check-options, which installs nothing; the GPU is nvidia-smi's answer,
given on PATH."""

import subprocess
import sys

import pytest
from conftest import REPO

SETUP = REPO / "docker" / "env" / "setup.sh"


def setup_check(tmp_path, *options: str, gpu: bool = False,
                kept: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """setup.sh --check-options on a venv whose earlier choices are `kept`
    (horovod-NAME files), on a machine with a GPU when `gpu`."""
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    for name, value in (kept or {}).items():
        (venv / f"horovod-{name}").write_text(f"{value}\n")
    path = "/usr/bin:/bin"
    if gpu:
        tools = tmp_path / "tools"
        tools.mkdir()
        smi = tools / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
        smi.chmod(0o755)
        path = f"{tools}:{path}"
    return subprocess.run([str(SETUP), "--venv", str(venv), *options, "--check-options"],
                          env={"PATH": path, "HVT_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=30)


CHANGED = "setup.sh: Horovod's GPU operations: nccl ({}), was none; --gpu-ops none keeps them"


@pytest.mark.parametrize(("options", "gpu", "kept", "said"), [
    # The Slurm page's login node: no GPU here, a CUDA asked for.
    (["--cuda", "13"], False, {}, ["nccl (--cuda 13), CUDA 13"]),
    # The test command's venv (none), set up again for a GPU job.
    (["--cuda", "12"], False, {"gpu-ops": "none"},
     [CHANGED.format("--cuda 12"), "nccl (--cuda 12), CUDA 12"]),
    ([], True, {"gpu-ops": "none", "cuda": "13"},
     [CHANGED.format("a GPU here"), "nccl (a GPU here), CUDA 13"]),
    ([], True, {}, ["nccl (auto: a GPU here), CUDA 13"]),
    ([], False, {}, ["none (auto: no GPU here), CUDA 13"]),
    # Asked for, or the venv's and nothing against it: no word of a change.
    (["--cuda", "13", "--gpu-ops", "none"], True, {"gpu-ops": "none"}, ["none, CUDA 13"]),
    ([], False, {"gpu-ops": "none"}, ["none (this venv's choice), CUDA 13"]),
    ([], True, {"gpu-ops": "nccl", "cuda": "12"}, ["nccl (this venv's choice), CUDA 12"]),
])
def test_a_cuda_or_a_gpu_means_nccl_unless_asked_otherwise(tmp_path, options, gpu, kept, said):
    result = setup_check(tmp_path, "--frameworks", "pytorch", *options, gpu=gpu, kept=kept)
    assert result.returncode == 0, result.stderr
    *changes, choice = said
    assert result.stdout.splitlines() == [
        *changes, f"setup.sh: would set up pytorch, GPU operations {choice}, Keras 3"]


def test_a_cpu_venv_of_three_frameworks_on_a_gpu_machine_says_why_it_stays_so(tmp_path):
    kept = {"gpu-ops": "none", "cuda": "13", "frameworks": "pytorch,tensorflow,mxnet"}
    result = setup_check(tmp_path, gpu=True, kept=kept)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "setup.sh: this machine has GPUs, and Horovod stays CPU-only for "
        "pytorch,tensorflow,mxnet (NCCL serves pytorch, and tensorflow on CUDA 12): --frameworks "
        "pytorch --gpu-ops nccl, or --frameworks pytorch,tensorflow --cuda 12, for the GPUs",
        "setup.sh: would set up pytorch,tensorflow,mxnet, GPU operations none (this venv's "
        "choice), CUDA 13, Keras 3"]


@pytest.mark.parametrize(("options", "kept", "said"), [
    # TensorFlow's GPU wheel is a CUDA 12 build: NCCL with it means CUDA 12.
    (["--gpu-ops", "nccl"], {}, "nccl, CUDA 12"),
    (["--cuda", "12"], {}, "nccl (--cuda 12), CUDA 12"),
    # A GPU machine: the test command's CPU venv turns to the GPUs where it can.
    ([], {"gpu-ops": "none", "cuda": "12"}, "nccl (a GPU here), CUDA 12"),
])
def test_tensorflow_on_gpus_is_cuda_12(tmp_path, options, kept, said):
    result = setup_check(tmp_path, "--frameworks", "pytorch,tensorflow", *options, gpu=True,
                         kept=kept)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"setup.sh: would set up pytorch,tensorflow, GPU operations {said}, Keras 3")


@pytest.mark.parametrize(("frameworks", "options", "kept", "message"), [
    ("pytorch,tensorflow", ["--cuda", "13"], {},
     "TensorFlow on GPUs needs CUDA 12 (its GPU wheels are CUDA 12 builds), and this is CUDA "
     "13: add --cuda 12"),
    ("pytorch,tensorflow", ["--gpu-ops", "nccl"], {"cuda": "13"},
     "TensorFlow on GPUs needs CUDA 12 (its GPU wheels are CUDA 12 builds), and this is CUDA "
     "13 (this venv's): add --cuda 12"),
    ("tensorflow,mxnet", ["--cuda", "12"], {},
     "--gpu-ops nccl (from --cuda 12) builds Horovod for pytorch and tensorflow (got "
     "--frameworks tensorflow,mxnet); MXNet runs in a --gpu-ops none environment"),
])
def test_nccl_for_a_framework_it_cannot_serve_is_one_line(tmp_path, frameworks, options, kept,
                                                         message):
    result = setup_check(tmp_path, "--frameworks", frameworks, *options, kept=kept)
    assert result.returncode == 2
    assert result.stderr == f"setup.sh: error: {message}\n"
