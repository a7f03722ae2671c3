"""The Horovod recipe: the installed build has what was asked for, the cache
is keyed by everything that went into the wheel, and a second run takes the
cached wheel instead of compiling."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import BIN, REPO

ENV_DIR = REPO / "docker" / "env"  # the environment recipe, also the image's

SCRIPT = ENV_DIR / "build_horovod.sh"

SETUP = ENV_DIR / "setup.sh"

spec = importlib.util.spec_from_file_location("build_horovod", ENV_DIR / "build_horovod.py")

build_horovod = importlib.util.module_from_spec(spec)

spec.loader.exec_module(build_horovod)


@pytest.mark.parametrize("controller", [[], ["--gloo"]], ids=["mpi", "gloo"])
def test_horovodrun_asks_how_horovod_was_built_without_importing_a_framework(tmp_path,
                                                                             controller):
    """The launch-checks patch: before every launch horovodrun asks whether
    Horovod was built with MPI or Gloo, which upstream answers by importing
    an extension and so its framework (TensorFlow first: seconds); it reads
    the extension's library instead. Frameworks that leave a mark when
    imported stand in front of the real ones."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    for name in ("tensorflow", "torch", "mxnet"):
        (shadow / f"{name}.py").write_text(f"open({str(tmp_path / name)!r}, 'w').close()\n")
    result = subprocess.run([str(BIN / "horovodrun"), "-np", "1", "-H", "localhost:1",
                             *controller, "true"],
                            env={**os.environ, "PYTHONPATH": str(shadow)},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [name for name in ("tensorflow", "torch", "mxnet") if (tmp_path / name).exists()]


TORCH_OPS_RANK = """
import torch
import horovod.torch as hvd

hvd.init()
mine = torch.arange(120.0).reshape(2, 3, 4, 5) * (hvd.rank() + 1)
summed = torch.arange(120.0).reshape(2, 3, 4, 5) * 3  # ranks 0 and 1
nhwc = mine.contiguous(memory_format=torch.channels_last)

def check(result, expected):
    assert result.is_contiguous(memory_format=torch.channels_last), result.stride()
    assert torch.equal(result, expected)

check(hvd.allreduce(nhwc, op=hvd.Sum, name="out-of-place"), summed)
in_place = nhwc.clone()
hvd.allreduce_(in_place, op=hvd.Sum, name="in-place")
check(in_place, summed)
for result, factor in zip(hvd.grouped_allreduce([nhwc, nhwc * 2], op=hvd.Sum, name="grouped"),
                          (1, 2)):
    check(result, summed * factor)
check(hvd.broadcast(nhwc, root_rank=1, name="broadcast"), summed * 2 / 3)

# A channels_last model trains as a contiguous one does on every rank.
model = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
torch.manual_seed(hvd.rank())
model(torch.randn(8, 3, 6, 6)).square().mean().backward()
optimizer.step()
weights = hvd.allgather(model.weight.detach().contiguous().unsqueeze(0), name="weights")
assert torch.equal(weights[0], weights[1])
print("channels_last ok", flush=True)

# Rank 1 comes 3 s late to an allreduce: rank 0 waits in it, and its thread's
# CPU time says whether it waited blocked or spinning.
import time
if hvd.rank() == 1:
    time.sleep(3)
cpu_before, before = time.thread_time(), time.monotonic()
hvd.allreduce(torch.ones(1), name="late")
print(f"rank {hvd.rank()} waited {time.monotonic() - before:.2f} s "
      f"on {time.thread_time() - cpu_before:.3f} s of CPU", flush=True)
"""


@pytest.fixture(scope="module")
def patched_torch_ops(tmp_path_factory) -> subprocess.CompletedProcess:
    """Two ranks over Gloo through the torch ops two patches change."""
    script = tmp_path_factory.mktemp("torch-ops") / "rank.py"
    script.write_text(TORCH_OPS_RANK)
    return subprocess.run([str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
                           sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)


def test_channels_last_tensors_reduce_and_broadcast_as_contiguous_ones(patched_torch_ops):
    """The torch-channels-last patch: upstream refuses tensors that are not
    contiguous, so a model in channels_last (NHWC) could not train; allreduce
    and broadcast now take them and keep their layout, and the weights stay
    the same on every rank."""
    result = patched_torch_ops
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("channels_last ok") == 2


def test_a_rank_waiting_for_a_collective_leaves_its_core(patched_torch_ops):
    """The torch-wait-blocks patch: upstream's wait for a collective polls
    and yields, a core at 100% for as long as the other ranks take; it
    blocks instead. (Spinning, even a tenth of a core over the 3 s would
    show here.)"""
    result = patched_torch_ops
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    waited = re.search(r"rank 0 waited ([\d.]+) s on ([\d.]+) s of CPU", result.stdout)
    assert waited, result.stdout[-3000:]
    assert float(waited[1]) > 2.0, waited[0]  # rank 0 really waited for rank 1
    assert float(waited[2]) < 0.1, waited[0]


# Rank 1 reaches the Gloo rendezvous server through a forwarder in its own
# process that holds each request back a moment, so that rank 0 finishes its
# one-rank cross_0 scope before rank 1 has finished the local scope: the
# order in which upstream's server lost rank 1's place and kept the local
# scope's keys for the next init.
REINIT_RANK = """
import os, socket, sys, threading, time

def forward(listener, port):
    def pipe(source, sink, delay):
        try:
            while data := source.recv(65536):
                time.sleep(delay)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", port))
        threading.Thread(target=pipe, args=(client, server, 0.02), daemon=True).start()
        threading.Thread(target=pipe, args=(server, client, 0), daemon=True).start()

if os.environ["HOROVOD_RANK"] == "1":
    listener = socket.create_server(("127.0.0.1", 0))
    port = int(os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    threading.Thread(target=forward, args=(listener, port), daemon=True).start()
    os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"] = str(listener.getsockname()[1])

import horovod.torch as hvd, torch
for _ in range(int(sys.argv[1])):
    hvd.init()
    hvd.allreduce(torch.ones(1))
    hvd.barrier()
    hvd.shutdown()
print("reinit ok", flush=True)
"""


def test_gloo_reinit_with_one_slow_rank_does_not_abort(tmp_path):
    """The gloo-rendezvous-scopes-apart patch: upstream's hvd.init() after
    hvd.shutdown() aborted the process ("Fatal Python error: Aborted") when
    one rank was a moment slower than the other, as Horovod's own
    test_torch.py did now and then."""
    script = tmp_path / "rank.py"
    script.write_text(REINIT_RANK)
    result = subprocess.run([str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
                             sys.executable, str(script), "8"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("reinit ok") == 2


def installed_frameworks() -> str:
    """The frameworks this venv's Horovod was built for, as setup.sh recorded."""
    record = Path(sys.prefix) / build_horovod.BUILD_RECORD
    return ",".join(json.loads(record.read_text())["frameworks"])


def test_second_run_takes_the_cached_wheel_named_by_the_key_with_its_inputs():
    """The recipe run again for this venv's frameworks: it takes the wheel
    of the entry its key names (the key this venv's record holds, which
    --print-key gives: test_gpu_build_plan_finds_the_nccl_of_torchs_wheel),
    and the entry records what went into it."""
    result = subprocess.run([str(SCRIPT), "--python", sys.executable, "--no-install",
                             "--frameworks", installed_frameworks()],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "building Horovod" not in result.stdout
    assert "compiling mpi4py" not in result.stderr  # the test command's wheel, kept
    key = json.loads((Path(sys.prefix) / build_horovod.BUILD_RECORD).read_text())["key"]
    entry = build_horovod.default_cache_dir() / f"horovod-{build_horovod.HOROVOD_VERSION}-{key}"
    assert f"cached wheel in {entry} " in result.stdout, result.stdout
    assert list(entry.glob("horovod-0.28.1-*.whl"))
    inputs = (entry / "inputs.json").read_text()
    for fact in ("horovod-0.28.1-cxx-standard.patch", "horovod-0.28.1-ssh-host-key-checking.patch",
                 "horovod-0.28.1-torch-cpu-only.patch",
                 "horovod-0.28.1-launch-checks-without-frameworks.patch",
                 "horovod-0.28.1-torch-channels-last.patch", "pytorch",
                 "HOROVOD_WITH_GLOO"):
        assert fact in inputs


def test_a_pytorch_setup_takes_the_three_framework_wheel_offline(tmp_path):
    """The demo's setup (PyTorch alone) in a new venv, after the test
    command's (all three): a broken entry of its own key is said and
    removed, the test command's Horovod wheel serves it, and its mpi4py
    wheel (compiled once for this machine), and everything installs
    from the caches with no network (as root, in a network namespace of its
    own), the lock's packages at the lock's versions."""
    record = json.loads((Path(sys.prefix) / build_horovod.BUILD_RECORD).read_text())
    if set(record.get("wheel_frameworks", record["frameworks"])) != {
            "pytorch", "tensorflow", "mxnet"}:
        pytest.skip("this venv's Horovod wheel is not the test command's (all three frameworks)")
    cache = tmp_path / "wheels"
    real = build_horovod.default_cache_dir()
    mpi4py = [entry.name for entry in real.glob("mpi4py-*")]
    if not mpi4py:
        pytest.skip(f"no mpi4py wheel kept in {real} (this venv's mpi4py was installed before "
                    "setup.sh kept one): a new venv's setup keeps it")
    for kept in (build_horovod.entry_name(record["key"]), "uv", *mpi4py):
        shutil.copytree(real / kept, cache / kept, copy_function=os.link)
    key = subprocess.run([str(SCRIPT), "--python", sys.executable, "--print-key",
                          "--frameworks", "pytorch", "--gpu-ops", "none"],
                         capture_output=True, text=True, timeout=300).stdout.strip()
    broken = cache / build_horovod.entry_name(key)
    broken.mkdir()
    shutil.copy(cache / build_horovod.entry_name(record["key"]) / "inputs.json", broken)
    (broken / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl").write_bytes(b"PK\x03\x04cut")
    venv = tmp_path / "venv"
    command = [str(REPO / "scripts" / "setup.sh"), "--venv", str(venv), "--frameworks",
               "pytorch", "--gpu-ops", "none", "--no-apt"]
    if os.geteuid() == 0:
        command = ["unshare", "--net", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "HVT_WHEEL_CACHE": str(cache)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"the cached wheel in {broken} is broken" in result.stdout
    assert not broken.exists()
    assert "(built for pytorch, tensorflow, mxnet)" in result.stdout
    assert "building Horovod" not in result.stdout
    assert "compiling mpi4py" not in result.stderr  # the test command's wheel, kept

    check = subprocess.run([str(SCRIPT), "--python", str(venv / "bin" / "python"),
                            "--check-only"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    assert "[X] PyTorch" in check.stdout and "[ ] TensorFlow" in check.stdout
    pins = {}  # a name, its versions (one per Python where the lock's lines have markers)
    for line in build_horovod.LOCK.read_text().splitlines():
        if build_horovod.lock.pin_name(line):
            pins.setdefault(build_horovod.lock.pin_name(line), set()).add(
                line.split("==")[1].split(";")[0].strip())
    freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze",
                             "--exclude-editable"], capture_output=True, text=True,
                            timeout=120).stdout.splitlines()
    # (Horovod and mpi4py, installed from the cached wheels' files, are "NAME @ file://...".)
    installed = {build_horovod.lock.pin_name(line): line.split("==")[1] for line in freeze
                 if "==" in line}
    mpi4py = subprocess.run([str(venv / "bin" / "python"), "-c",
                             "import importlib.metadata as m; print(m.version('mpi4py'))"],
                            capture_output=True, text=True, timeout=60).stdout.strip()
    assert installed["torch"] in pins["torch"] and mpi4py in pins["mpi4py"]
    assert {name: version for name, version in installed.items()
            if version not in pins.get(name, ())} == {}


def test_check_only_checks_what_the_venv_was_built_for():
    """Its report is horovodrun --check-build's: the installed build has
    PyTorch, MPI and Gloo, and every library it links resolves."""
    result = subprocess.run([str(SCRIPT), "--python", sys.executable, "--check-only"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for line in ("[X] PyTorch", "[X] MPI", "[X] Gloo"):
        assert line in result.stdout, result.stdout
    assert "Every library Horovod links resolves" in result.stdout


def test_libraries_find_the_frameworks_relative_to_themselves_and_carry_no_debug_info():
    """The cached wheel serves other environments and images: its libraries
    carry no absolute path of the environment it was built in, and load the
    frameworks' libraries from beside them ($ORIGIN). They are built without
    debug info (the release-build patch)."""
    libraries = sorted(Path(sys.prefix).glob("lib/python*/site-packages/horovod/**/*.so"))
    assert libraries
    for library in libraries:
        runpath = subprocess.run(["patchelf", "--print-rpath", str(library)],
                                 capture_output=True, text=True, check=True).stdout.strip()
        assert all(d.startswith(("/usr/", "$ORIGIN/")) for d in runpath.split(":")), runpath
        assert "$ORIGIN/../../torch/lib" in runpath.split(":"), runpath
        sections = subprocess.run(["readelf", "--section-headers", "--wide", str(library)],
                                  capture_output=True, text=True, check=True).stdout
        assert ".text" in sections and ".debug_info" not in sections, library.name


def test_cuda_compiler_is_the_cuda_of_torchs_pin():
    """The lock's CUDA compiler wheels are those of the cuda-toolkit release
    torch's own pin names, so Horovod's kernels and torch share one CUDA."""
    toolkit = build_horovod.locked_version("cuda-toolkit")
    nvcc = build_horovod.locked_version("nvidia-cuda-nvcc")
    torch_requires = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.requires('torch'))"],
        capture_output=True, text=True, timeout=60).stdout
    assert re.search(rf"cuda-toolkit\[[^]]*\]=={re.escape(toolkit)}\b", torch_requires), \
        torch_requires
    assert nvcc.split(".")[:2] == toolkit.split(".")[:2]


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
    for patch in build_horovod.patch_series():  # each exactly where it was made
        build_horovod.apply_patch(patch, source)
    torch_cmake = (source / "horovod" / "torch" / "CMakeLists.txt").read_text()
    assert 'VERSION_LESS "2.14.0")\n    set(CMAKE_CXX_STANDARD 20)' in torch_cmake
    assert "set(CMAKE_CXX_STANDARD 17)" in Path(source / "CMakeLists.txt").read_text()
    remote = (source / "horovod" / "runner" / "util" / "remote.py").read_text()
    prefix = next(line for line in remote.splitlines() if line.startswith("SSH_COMMAND_PREFIX"))
    assert "StrictHostKeyChecking" not in prefix and "BatchMode=yes" in prefix
    find_torch = (source / "cmake" / "Modules" / "FindPytorch.cmake").read_text()
    assert "HOROVOD_TORCH_CPU_ONLY" in find_torch
    assert "os.environ.get('HOROVOD_CMAKE_BUILD_TYPE', 'RelWithDebInfo')" in (
        source / "setup.py").read_text()
    gloo_pair = (source / "third_party" / "gloo" / "gloo" / "transport" / "tcp" /
                 "pair.cc").read_text()
    assert "catch (const ::gloo::EnforceNotMet& ex)" in gloo_pair
    assert "#include <stdexcept>" in (source / "horovod" / "common" / "common.h").read_text()
    assert not list(source.rglob("*.orig")) and not list(source.rglob("*.rej"))
    driver = (source / "horovod" / "runner" / "driver" / "driver_service.py").read_text()
    assert "pipeline.horovodrun_network(" in driver
    launch = (source / "horovod" / "runner" / "launch.py").read_text()
    assert "pipeline.horovodrun_hosts(" in launch


def test_horovodrun_starts_open_mpi_without_its_ofi_btl():
    """The mpi-without-ofi-btl patch: mpirun as horovodrun starts it."""
    result = subprocess.run([str(BIN / "horovodrun"), "-np", "1", "-H", "localhost:1", "--mpi",
                             "--verbose", str(BIN / "python"), "-c", "pass"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    (mpirun,) = [line for line in result.stdout.splitlines() if line.startswith("mpirun ")]
    assert "-mca btl ^openib,ofi" in mpirun


@pytest.mark.parametrize("args, message", [
    (["--python", "/nonexistent/python"], "cannot run /nonexistent/python"),
    (["--frameworks", "caffe"], "--frameworks takes pytorch, tensorflow, mxnet"),
])
def test_bad_input_is_one_line(args, message):
    result = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--frameworks", "pytorch,jax"],
     "--frameworks: unknown framework 'jax'; it takes pytorch, tensorflow, mxnet"),
    (["--gpu-ops", "rocm"], "--gpu-ops: 'rocm'; it takes auto, nccl, none"),
    (["--cuda-archs", "8.0"], "--cuda-archs: '8.0'; it takes compute capabilities like 80,90, "
                              "or torch"),
    (["--frameworks", "pytorch,mxnet", "--gpu-ops", "nccl"],
     "--gpu-ops nccl builds Horovod for pytorch and tensorflow (got --frameworks pytorch,mxnet)"),
    (["--cuda", "11"], "--cuda: '11'; it takes 13 or 12"),
])
def test_setup_refuses_bad_input_before_installing(tmp_path, args, message):
    venv = tmp_path / "venv"
    result = subprocess.run([str(SETUP), "--venv", str(venv), *args], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not venv.exists()
