"""The Horovod recipe: the installed build has what was asked for, the cache
is keyed by everything that went into the wheel, and a second run takes the
cached wheel instead of compiling."""

import importlib.util
import sys
from types import SimpleNamespace

import pytest
from conftest import REPO

ENV_DIR = REPO / "docker" / "env"  # the environment recipe, also the image's

spec = importlib.util.spec_from_file_location("build_horovod", ENV_DIR / "build_horovod.py")

build_horovod = importlib.util.module_from_spec(spec)

spec.loader.exec_module(build_horovod)

TORCH_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # 2.14.1+cu130's


def plan_for(torch_version="2.14.1+cu130", gpu_ops="none", frameworks=("pytorch",),
             cuda_archs="80,90", torch_archs=TORCH_ARCHS, without_mpi=False, torch_cuda=None):
    args = SimpleNamespace(frameworks=list(frameworks), gpu_ops=gpu_ops, jobs=2,
                           cuda_archs=cuda_archs, without_mpi=without_mpi)
    info = {"abi": "cpython-311-x86_64-linux-gnu", "machine": "x86_64",
            "frameworks": {"torch": torch_version}, "torch_cuda": torch_cuda, "nccl_home": None,
            "torch_archs": torch_archs}
    return build_horovod.plan(args, info)


def test_key_changes_with_torch_version_patch_and_flags(monkeypatch, tmp_path):
    base = build_horovod.cache_key(plan_for()[0])
    assert build_horovod.cache_key(plan_for()[0]) == base
    assert build_horovod.cache_key(plan_for(torch_version="2.13.0")[0]) != base

    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "a.patch").write_text("--- a/x\n+++ b/x\n")
    (patches / "series").write_text("a.patch\n")
    monkeypatch.setattr(build_horovod, "PATCH_DIR", patches)
    assert build_horovod.cache_key(plan_for()[0]) != base


def test_the_series_lists_every_patch_once_in_order_and_each_has_a_header():
    series = build_horovod.patch_series()
    assert sorted(p.name for p in series) == sorted(
        p.name for p in build_horovod.PATCH_DIR.glob("*.patch"))
    for patch in series:
        first = patch.read_text().splitlines()[0]
        assert not first.startswith(("--- ", "diff ")), f"{patch.name} has no header"
        assert "Upstream" in patch.read_text().split("\n--- a/", 1)[0], patch.name


@pytest.mark.parametrize("series, files, message", [
    ("a.patch\nb.patch\n", ["a.patch"], "lists b.patch, which"),
    ("# only a\na.patch\n", ["a.patch", "b.patch"], "leaves out b.patch: list it"),
])
def test_a_series_that_misses_a_patch_is_one_error(monkeypatch, tmp_path, series, files,
                                                   message):
    for name in files:
        (tmp_path / name).write_text("--- a/x\n+++ b/x\n")
    (tmp_path / "series").write_text(series)
    monkeypatch.setattr(build_horovod, "PATCH_DIR", tmp_path)
    with pytest.raises(build_horovod.UserError, match=message):
        build_horovod.patch_series()


def test_a_hunk_that_moved_fails_with_the_patchs_name(tmp_path):
    """No fuzz, no offset: a patch made against other code stops the build."""
    source = tmp_path / "source"
    source.mkdir()
    lines = [f"line {n}\n" for n in range(1, 21)]
    (source / "f.txt").write_text("".join(lines))
    patch = tmp_path / "one.patch"
    patch.write_text("--- a/f.txt\n+++ b/f.txt\n@@ -9,3 +9,3 @@\n line 9\n-line 10\n+ten\n"
                     " line 11\n")
    build_horovod.apply_patch(patch, source)
    assert "ten\n" in (source / "f.txt").read_text()
    (source / "f.txt").write_text("".join(["new\n", "lines\n", *lines]))  # moved by 2
    with pytest.raises(build_horovod.RunFailed, match="^one.patch does not apply where it was "
                                                      "made: .*offset 2 lines"):
        build_horovod.apply_patch(patch, source)


def test_build_flags_follow_the_frameworks():
    inputs, env = plan_for()
    assert env["HOROVOD_WITH_PYTORCH"] == "1"
    assert env["HOROVOD_WITHOUT_TENSORFLOW"] == "1" and env["HOROVOD_WITHOUT_MXNET"] == "1"
    assert env["HOROVOD_WITH_MPI"] == "1" and env["HOROVOD_WITH_GLOO"] == "1"
    assert "HOROVOD_GPU_OPERATIONS" not in env
    # Without GPU operations the torch extension is CPU-only: no CUDA toolkit.
    assert env["HOROVOD_TORCH_CPU_ONLY"] == "1"
    # Optimised, without debug info; the key covers it.
    assert env["HOROVOD_CMAKE_BUILD_TYPE"] == "Release"
    assert inputs["flags"]["HOROVOD_CMAKE_BUILD_TYPE"] == "Release"


def test_a_host_without_open_mpi_builds_for_gloo_alone(monkeypatch, tmp_path):
    """No mpirun: refused in one line that names the way out; with
    --without-mpi the build has no MPI, and the key says so."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun (nor anything else) on it
    monkeypatch.setenv("CXX", sys.executable)  # a program that answers --version
    with pytest.raises(build_horovod.UserError, match="^mpirun not found: .*--without-mpi"):
        plan_for()
    inputs, env = plan_for(without_mpi=True)
    assert env["HOROVOD_WITHOUT_MPI"] == "1" and "HOROVOD_WITH_MPI" not in env
    assert env["HOROVOD_WITH_GLOO"] == "1"
    # The key covers it: the flags, and no Open MPI version.
    assert inputs["mpi"] is None and inputs["flags"]["HOROVOD_WITHOUT_MPI"] == "1"


def nccl_of_version(monkeypatch, tmp_path, version: str) -> None:
    """An NCCL home whose header says `version`, and no CUDA_HOME."""
    nccl = tmp_path / "nccl"
    (nccl / "include").mkdir(parents=True)
    major, minor, patch = version.split(".")
    (nccl / "include" / "nccl.h").write_text(
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n")
    monkeypatch.setenv("HOROVOD_NCCL_HOME", str(nccl))
    monkeypatch.delenv("CUDA_HOME", raising=False)


def test_nccl_build_plan(monkeypatch, tmp_path):
    """An NCCL build compiles for the architectures asked for, with the
    lock's CUDA compiler, and each of them is part of the key."""
    nccl_of_version(monkeypatch, tmp_path, "2.30.7")
    inputs, env = plan_for(gpu_ops="nccl")
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert env["HOROVOD_BUILD_CUDA_CC_LIST"] == "80,90"
    assert "HOROVOD_TORCH_CPU_ONLY" not in env
    assert inputs["nccl"] == "2.30.7"
    assert inputs["cuda_toolkit"] == f"cuda-toolkit=={build_horovod.locked_version('cuda-toolkit')}"
    key = build_horovod.cache_key(inputs)
    assert build_horovod.cache_key(plan_for(gpu_ops="nccl", cuda_archs="90")[0]) != key
    assert build_horovod.cache_key(plan_for()[0]) != key
    # The default: what torch has native code for, read from torch.
    inputs, env = plan_for(gpu_ops="nccl", cuda_archs="torch")
    assert env["HOROVOD_BUILD_CUDA_CC_LIST"] == inputs["cuda_archs"] == "75,80,86,90,100,120"
    with pytest.raises(build_horovod.UserError, match="^--cuda-archs torch: the environment's "
                                                      "torch lists no CUDA architectures"):
        plan_for(gpu_ops="nccl", cuda_archs="torch", torch_archs=[])


def test_nvcc_refuses_an_architecture_in_one_line(tmp_path):
    """Against the real CUDA compiler (the lock's wheels, in the wheel cache
    once an NCCL build ran; installed here otherwise)."""
    cuda_home = build_horovod.cuda_toolkit(build_horovod.default_cache_dir(), sys.executable)
    build_horovod.check_cuda_archs("80,90", cuda_home)
    # Every architecture this torch has native code for compiles (the default).
    info = build_horovod.probe_python(sys.executable, ["pytorch"])
    build_horovod.check_cuda_archs(build_horovod.resolved_cuda_archs(
        "torch", info, build_horovod.build_cuda(["pytorch"], info)), cuda_home)
    with pytest.raises(build_horovod.UserError) as refused:
        build_horovod.check_cuda_archs("80,35", cuda_home)
    message = str(refused.value)
    assert message.startswith("--cuda-archs 80,35: nvcc in ") and "refuses 35; it takes " in message
    assert "\n" not in message


def test_the_cuda12_lock_is_the_lock_with_the_variants_pins_in_place():
    lock13 = build_horovod.lock.lock_text(13)
    lock12 = build_horovod.lock.lock_text(12)
    variant = {build_horovod.lock.pin_name(line): line
               for line in build_horovod.lock.CUDA12_PINS.read_text().splitlines()
               if build_horovod.lock.pin_name(line)}
    pins12 = [line for line in lock12.splitlines() if build_horovod.lock.pin_name(line)]
    once = [build_horovod.lock.pin_name(x) for x in pins12 if ";" not in x]
    for line in pins12:  # each package once (per-Python lines aside)
        name = build_horovod.lock.pin_name(line)
        assert line == variant.get(name, line)
        assert ";" in line or once.count(name) == 1
    assert set(variant.values()) <= set(pins12)
    assert build_horovod.locked_version("torch", 12) == "2.10.0"
    assert build_horovod.locked_version("torch") == build_horovod.locked_version("torch", 13)
    # Everything else the variant does not name is the lock's own line, but
    # CUDA 13's libraries.
    kept = {line for line in lock13.splitlines()
            if build_horovod.lock.pin_name(line) not in variant}
    dropped = kept - set(lock12.splitlines())
    assert dropped and all(build_horovod.lock.is_cuda_library(build_horovod.lock.pin_name(x))
                           for x in dropped)
    assert not [x for x in pins12 if x.startswith("nvidia-") and "-cu12==" not in x]


def test_the_cuda12_build_compiles_with_debians_cuda_12_4_for_what_it_knows(monkeypatch,
                                                                            tmp_path):
    """torch 2.10's list runs to sm_120; CUDA 12.4's compiler stops at sm_90,
    whose PTX the driver compiles for the later GPUs."""
    nccl_of_version(monkeypatch, tmp_path, "2.27.5")
    inputs, env = plan_for(torch_version="2.10.0+cu128", torch_cuda="12.8", gpu_ops="nccl",
                           cuda_archs="torch")
    assert env["HOROVOD_BUILD_CUDA_CC_LIST"] == inputs["cuda_archs"] == "75,80,86,90"
    assert inputs["cuda"] == "12.8" and inputs["nccl"] == "2.27.5"
    assert inputs["cuda_toolkit"] == "nvidia-cuda-toolkit 12.4.131 (Debian)"
    assert all(digest and len(digest) == 64 for digest in build_horovod.CUDA12_DEBS.values())


TF_GPU = {"tensorflow": "2.21.0", "tensorflow_cuda": "12.5.1",
          "tensorflow_archs": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]}


def test_tensorflow_takes_nccl_from_its_gpu_wheel_on_torchs_cuda_major(monkeypatch, tmp_path):
    """TensorFlow's GPU wheel (CUDA 12.5) beside torch's CUDA 12 build
    compiles on torch's CUDA; alone, on its own, for its architectures. Its
    CPU wheel, or a torch of another CUDA major, is one line each."""
    nccl_of_version(monkeypatch, tmp_path, "2.27.5")
    args = SimpleNamespace(frameworks=["pytorch", "tensorflow"], gpu_ops="nccl", jobs=2,
                           cuda_archs="torch", without_mpi=False)
    info = {"abi": "cpython-311-x86_64-linux-gnu", "machine": "x86_64", "nccl_home": None,
            "frameworks": {"torch": "2.10.0+cu128", "tensorflow": "2.21.0"},
            "torch_cuda": "12.8", "torch_archs": TORCH_ARCHS, **{k: v for k, v in TF_GPU.items()
                                                                 if k != "tensorflow"}}
    inputs, env = build_horovod.plan(args, info)
    assert inputs["cuda"] == "12.8" and env["HOROVOD_WITH_TENSORFLOW"] == "1"
    assert inputs["cuda_toolkit"] == "nvidia-cuda-toolkit 12.4.131 (Debian)"
    alone = SimpleNamespace(**{**vars(args), "frameworks": ["tensorflow"]})
    inputs, env = build_horovod.plan(alone, {**info, "torch_cuda": None, "torch_archs": None})
    assert inputs["cuda"] == "12.5.1" and inputs["cuda_archs"] == "60,70,80,89"
    with pytest.raises(build_horovod.UserError, match=r"^NCCL GPU operations for TensorFlow "
                       r"need its GPU wheel \(tensorflow, a CUDA 12 build\), and this is a CPU "
                       r"build \(tensorflow-cpu\)"):
        build_horovod.plan(args, {**info, "tensorflow_cuda": None})
    with pytest.raises(build_horovod.UserError, match=r"^torch is a CUDA 13.0 build and "
                       r"TensorFlow a CUDA 12.5.1 one: one Horovod links one CUDA runtime; "
                       r"scripts/setup.sh --cuda 12 installs"):
        build_horovod.plan(args, {**info, "torch_cuda": "13.0"})


def inputs_for(*frameworks, torch_version="2.14.1+cu130"):
    """What a CPU build for these frameworks is keyed by, on this machine."""
    args = SimpleNamespace(frameworks=list(frameworks), gpu_ops="none", jobs=2,
                           cuda_archs="torch", without_mpi=False)
    info = {"abi": "cpython-311-x86_64-linux-gnu", "machine": "x86_64", "torch_cuda": None,
            "nccl_home": None,
            "frameworks": {"torch": torch_version, "tensorflow": "2.15.1", "mxnet": "1.9.1"}}
    return build_horovod.plan(args, info)[0]


def cache_entry(cache, inputs, member=b"binding"):
    """A cache entry as build_wheel leaves one: the wheel (a zip; its member
    stored uncompressed, so a flipped byte is found by its checksum) beside
    inputs.json."""
    import json
    import zipfile

    entry = cache / build_horovod.entry_name(build_horovod.cache_key(inputs))
    entry.mkdir(parents=True)
    with zipfile.ZipFile(entry / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl", "w") as wheel:
        wheel.writestr("horovod/torch/mpi_lib_v2.so", member)
    (entry / "inputs.json").write_text(json.dumps(inputs))
    return entry


ALL_THREE = ("pytorch", "tensorflow", "mxnet")


def test_a_wheel_for_more_frameworks_serves_a_setup_for_fewer():
    torch_only = inputs_for("pytorch")
    assert build_horovod.serves(inputs_for(*ALL_THREE), torch_only)
    assert build_horovod.serves(inputs_for("pytorch", "mxnet"), torch_only)
    assert not build_horovod.serves(torch_only, inputs_for(*ALL_THREE))
    # The frameworks it shares must be the same versions, and all else the same.
    assert not build_horovod.serves(inputs_for(*ALL_THREE, torch_version="2.13.0"), torch_only)
    assert not build_horovod.serves({**inputs_for(*ALL_THREE), "mpi": "Open MPI 5.0.7"},
                                    torch_only)
    assert not build_horovod.serves({**inputs_for(*ALL_THREE), "patches": {}}, torch_only)


def test_the_cache_takes_this_keys_entry_else_the_fewest_frameworks_that_serve(tmp_path):
    torch_only = inputs_for("pytorch")
    key = build_horovod.cache_key(torch_only)
    cache_entry(tmp_path, inputs_for(*ALL_THREE))
    two = cache_entry(tmp_path, inputs_for("pytorch", "tensorflow"))
    cache_entry(tmp_path, inputs_for("tensorflow"))
    assert build_horovod.serving_entry(tmp_path, torch_only, key) == two
    exact = cache_entry(tmp_path, torch_only)
    assert build_horovod.serving_entry(tmp_path, torch_only, key) == exact
    assert build_horovod.serving_entry(tmp_path, inputs_for("mxnet"),
                                       build_horovod.cache_key(inputs_for("mxnet"))) is not None


def truncate(entry):
    wheel = next(entry.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:40])


def garble(entry):
    wheel = next(entry.glob("*.whl"))
    data = bytearray(wheel.read_bytes())
    at = data.index(b"binding")
    data[at] ^= 0xFF
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize("break_it, why", [
    (truncate, "does not read as a wheel"),
    (garble, "horovod/torch/mpi_lib_v2.so fails its checksum"),
    (lambda entry: (entry / "inputs.json").unlink(), "inputs.json is missing or unreadable"),
    (lambda entry: (entry / "inputs.json").write_text("{"), "inputs.json is missing or unreadable"),
    (lambda entry: next(entry.glob("*.whl")).unlink(), "no wheel in it"),
])
def test_a_broken_entry_is_said_and_removed_so_that_it_is_built_again(tmp_path, capsys,
                                                                     break_it, why):
    torch_only = inputs_for("pytorch")
    entry = cache_entry(tmp_path, torch_only)
    break_it(entry)
    assert build_horovod.serving_entry(tmp_path, torch_only,
                                       build_horovod.cache_key(torch_only)) is None
    said = capsys.readouterr().out
    assert f"the cached wheel in {entry} is broken" in said and why in said
    assert not entry.exists()
