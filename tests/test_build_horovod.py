"""The Horovod recipe: the installed build has what was asked for, the cache
is keyed by everything that went into the wheel, and a second run takes the
cached wheel instead of compiling."""

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import BIN, REPO

SCRIPT = REPO / "scripts" / "build_horovod.sh"
spec = importlib.util.spec_from_file_location("build_horovod",
                                              REPO / "scripts" / "build_horovod.py")
build_horovod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_horovod)


def test_installed_horovod_has_pytorch_mpi_and_gloo():
    result = subprocess.run([str(BIN / "horovodrun"), "--check-build"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0
    for line in ("[X] PyTorch", "[X] MPI", "[X] Gloo"):
        assert line in result.stdout, result.stdout


def installed_frameworks() -> str:
    """The frameworks this venv's Horovod was built for, as setup.sh recorded."""
    record = Path(sys.prefix) / build_horovod.BUILD_RECORD
    return ",".join(json.loads(record.read_text())["frameworks"])


def test_second_run_takes_the_cached_wheel():
    result = subprocess.run([str(SCRIPT), "--python", sys.executable, "--no-install",
                             "--frameworks", installed_frameworks()],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "cached wheel" in result.stdout
    assert "building Horovod" not in result.stdout


def test_cache_entry_is_named_by_the_key_and_records_its_inputs():
    key = subprocess.run([str(SCRIPT), "--python", sys.executable, "--print-key",
                          "--frameworks", installed_frameworks()],
                         capture_output=True, text=True, timeout=300).stdout.strip()
    entry = build_horovod.default_cache_dir() / f"horovod-{build_horovod.HOROVOD_VERSION}-{key}"
    assert list(entry.glob("horovod-0.28.1-*.whl"))
    inputs = (entry / "inputs.json").read_text()
    for fact in ("horovod-0.28.1-cxx-standard.patch", "horovod-0.28.1-ssh-host-key-checking.patch",
                 "horovod-0.28.1-torch-cpu-only.patch", "pytorch", "HOROVOD_WITH_GLOO"):
        assert fact in inputs


def plan_for(torch_version="2.14.1+cu130", gpu_ops="none", frameworks=("pytorch",)):
    args = SimpleNamespace(frameworks=list(frameworks), gpu_ops=gpu_ops, jobs=2)
    info = {"abi": "cpython-311-x86_64-linux-gnu", "machine": "x86_64",
            "frameworks": {"torch": torch_version}, "torch_cuda": None, "nccl_home": None}
    return build_horovod.plan(args, info)


def test_key_changes_with_torch_version_patch_and_flags(monkeypatch, tmp_path):
    base = build_horovod.cache_key(plan_for()[0])
    assert build_horovod.cache_key(plan_for()[0]) == base
    assert build_horovod.cache_key(plan_for(torch_version="2.13.0")[0]) != base

    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "a.patch").write_text("--- a/x\n+++ b/x\n")
    monkeypatch.setattr(build_horovod, "PATCH_DIR", patches)
    assert build_horovod.cache_key(plan_for()[0]) != base


def test_build_flags_follow_the_frameworks():
    _, env = plan_for()
    assert env["HOROVOD_WITH_PYTORCH"] == "1"
    assert env["HOROVOD_WITHOUT_TENSORFLOW"] == "1" and env["HOROVOD_WITHOUT_MXNET"] == "1"
    assert env["HOROVOD_WITH_MPI"] == "1" and env["HOROVOD_WITH_GLOO"] == "1"
    assert "HOROVOD_GPU_OPERATIONS" not in env
    # Without GPU operations the torch extension is CPU-only: no CUDA toolkit.
    assert env["HOROVOD_TORCH_CPU_ONLY"] == "1"


def test_check_only_checks_what_the_venv_was_built_for():
    result = subprocess.run([str(SCRIPT), "--python", sys.executable, "--check-only"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "[X] PyTorch" in result.stdout


def test_gpu_build_plan_finds_the_nccl_of_torchs_wheel():
    """What a GPU image's build resolves, checked here without a GPU: NCCL
    from the nvidia-nccl wheel torch depends on, and a key of its own."""
    gpu = subprocess.run([str(SCRIPT), "--python", sys.executable, "--print-key",
                          "--frameworks", "pytorch", "--gpu-ops", "nccl"],
                         capture_output=True, text=True, timeout=300)
    cpu = subprocess.run([str(SCRIPT), "--python", sys.executable, "--print-key",
                          "--frameworks", "pytorch", "--gpu-ops", "none"],
                         capture_output=True, text=True, timeout=300)
    assert gpu.returncode == 0, gpu.stderr
    assert len(gpu.stdout.strip()) == 16 and gpu.stdout != cpu.stdout


def test_patches_apply_to_the_pinned_sdist(tmp_path):
    sdist = build_horovod.default_cache_dir() / "sdist" / build_horovod.SDIST_NAME
    if not sdist.is_file():
        pytest.skip("no cached sdist (setup.sh downloads it)")
    assert build_horovod.sha256_of(sdist) == build_horovod.SDIST_SHA256
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    source = tmp_path / "horovod-0.28.1"
    for patch in sorted(build_horovod.PATCH_DIR.glob("*.patch")):
        subprocess.run(["patch", "-p1", "--forward", "--batch", "-i", str(patch)], cwd=source,
                       check=True, capture_output=True)
    torch_cmake = (source / "horovod" / "torch" / "CMakeLists.txt").read_text()
    assert 'VERSION_LESS "2.14.0")\n    set(CMAKE_CXX_STANDARD 20)' in torch_cmake
    assert "set(CMAKE_CXX_STANDARD 17)" in Path(source / "CMakeLists.txt").read_text()
    remote = (source / "horovod" / "runner" / "util" / "remote.py").read_text()
    prefix = next(line for line in remote.splitlines() if line.startswith("SSH_COMMAND_PREFIX"))
    assert "StrictHostKeyChecking" not in prefix and "BatchMode=yes" in prefix
    find_torch = (source / "cmake" / "Modules" / "FindPytorch.cmake").read_text()
    assert "HOROVOD_TORCH_CPU_ONLY" in find_torch


@pytest.mark.parametrize("args, message", [
    (["--python", "/nonexistent/python"], "cannot run /nonexistent/python"),
    (["--frameworks", "caffe"], "--frameworks takes pytorch, tensorflow, mxnet"),
])
def test_bad_input_is_one_line(args, message):
    result = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
