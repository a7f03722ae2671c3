"""The one Horovod recipe: sdist from PyPI, the project's patches, a wheel
built for the frameworks of a given Python environment, cached outside the
checkout under a key of everything that went into it, then installed and
checked with `horovodrun --check-build`.

build_horovod.sh beside it is the entry point; setup.sh beside it (behind
scripts/setup.sh and the image's builder) calls it.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

HOROVOD_VERSION = "0.28.1"
SDIST_NAME = f"horovod-{HOROVOD_VERSION}.tar.gz"
SDIST_SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
HERE = Path(__file__).resolve().parent
PATCH_DIR = HERE / "patches"
# "torch": every architecture the environment's torch has native code for
# (torch.cuda.get_arch_list()), read when building; the newest also goes in
# as PTX, which the driver compiles for GPUs that come later.
DEFAULT_CUDA_ARCHS = "torch"
BUILD_RECORD = "horovod-build.json"  # in the environment's prefix: what is installed
FRAMEWORKS = {  # our name: (import name, Horovod's flag suffix, --check-build label)
    "pytorch": ("torch", "PYTORCH", "PyTorch"),
    "tensorflow": ("tensorflow", "TENSORFLOW", "TensorFlow"),
    "mxnet": ("mxnet", "MXNET", "MXNet"),
}
PROBE = r"""
import importlib, json, platform, sys, sysconfig
out = {"python": sys.version.split()[0], "abi": sysconfig.get_config_var("SOABI"),
       "machine": platform.machine(), "prefix": sys.prefix, "frameworks": {}, "errors": {}}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        out["frameworks"][name] = module.__version__
        if name == "torch":
            out["torch_cuda"] = module.version.cuda
            # get_arch_list() is empty without a GPU before torch 2.11; the
            # flags it reads are there either way.
            flags = getattr(module._C, "_cuda_getArchFlags", lambda: "")() or ""
            out["torch_archs"] = module.cuda.get_arch_list() or flags.split()
        if name == "tensorflow":
            # tensorflow-cpu's build information names no CUDA.
            build = module.sysconfig.get_build_info()
            out["tensorflow_cuda"] = build.get("cuda_version")
            out["tensorflow_archs"] = list(build.get("cuda_compute_capabilities") or [])
    except Exception as err:
        out["errors"][name] = f"{type(err).__name__}: {err}"
def package_dir(name):
    try:
        return list(importlib.import_module(name).__path__)[0]
    except Exception:
        return None
out["nccl_home"] = package_dir("nvidia.nccl")
print(json.dumps(out))
"""


def recipe_module(name: str):
    """A module beside this file, loaded by path: this file is run as a
    script, or loaded by path itself (horovod_train/image/build.py)."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = recipe_module("lock")
wheel_cache = recipe_module("wheel_cache")
first_line = wheel_cache.first_line
default_cache_dir = wheel_cache.default_cache_dir
LOCK = lock.LOCK
CUDA_MAJORS = lock.CUDA_MAJORS


# Standalone on purpose: this runs inside the image build, before the
# project's package is installed, so it cannot import horovod_train.core.errors.
# It follows the same convention (run_main below): bad input or a missing
# tool is a UserError, one line `build_horovod: error: ...` and exit 2; a step
# that started and failed is a RunFailed, one line and exit 1; Ctrl-C 130.
class UserError(Exception):
    """Bad input or environment, for the user to fix: exit 2."""


class RunFailed(Exception):
    """A step that started and failed, the input being fine: exit 1."""


def log(message: str) -> None:
    print(f"build_horovod: {message}", flush=True)


def locked_version(package: str, cuda_major: int = CUDA_MAJORS[0]) -> str:
    """The version the lock of torch's CUDA major pins for a package."""
    try:
        return lock.locked_version(package, cuda_major)
    except KeyError:
        raise RunFailed(f"the lock pins no {package}") from None


def probe_python(python: str, frameworks: list[str]) -> dict:
    modules = [FRAMEWORKS[f][0] for f in frameworks]
    try:
        result = subprocess.run([python, "-c", PROBE, *modules], capture_output=True, text=True,
                                timeout=300)
    except OSError as err:
        raise UserError(f"cannot run {python}: {err.strerror}") from None
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise RunFailed(f"{python} failed to report its packages: {detail}")
    info = json.loads(result.stdout.strip().splitlines()[-1])
    for name, error in info["errors"].items():
        raise UserError(f"{name} does not import in {python} ({error}); install it first "
                        "(scripts/setup.sh --frameworks ...)")
    return info


# The CUDA 12 compiler. PyPI's CUDA 12 compiler wheels (nvidia-cuda-nvcc-cu12)
# carry ptxas alone, and NVIDIA's own repositories may be out of reach where
# the image builds; Debian ships CUDA 12.4's (non-free, trixie) as packages
# of NVIDIA's binaries, which run on bookworm. They are fetched by URL,
# checked against these digests, and unpacked into the cache, not installed.
# CUDA 12.4's headers and compiler with torch's 12.8 runtime: CUDA 12 builds
# run on any later 12.x runtime.
DEBIAN_POOL = "http://deb.debian.org/debian/pool"
CUDA12_TOOLKIT = "12.4.131"
CUDA12_NEWEST_ARCH = 90  # the newest architecture its nvcc compiles for
CUDA12_DEBS = {  # path in the pool: sha256
    "non-free/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb":
        "cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319",
    "non-free/n/nvidia-cuda-toolkit/nvidia-cuda-dev_12.4.127~12.4.1-2_amd64.deb":
        "d846838f914a0176948d48a8bcade5d6dbcccb5c9374343f6475f5503f173ee0",
    "non-free/n/nvidia-cuda-toolkit/libcudart12_12.4.127~12.4.1-2_amd64.deb":
        "361b3721cf84bf068e111ff013c819de61cb475268b0d38db99839471f1b4130",
    "non-free/n/nvidia-cuda-toolkit/libnvvm4_12.4.131~12.4.1-2_amd64.deb":
        "3c905c1df7453e1ad477516c4465629c310d2f58a796d66f44070dc289e7ec12",
    # <nv/target>, which CUDA 12.4's cuda_fp16.h includes
    "main/c/cccl/libcu++-dev_2.3.2-2_all.deb":
        "30e911c1909265591b5ea793df0e49e56bed631238b68b3e75c97590c4985686",
}
# Debian's nvcc.profile names /usr paths; the tree's is relative to nvcc.
NVCC_PROFILE = """\
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


def fetch_deb(pool_path: str, digest: str, into: Path) -> Path:
    import urllib.request

    target = into / pool_path.rsplit("/", 1)[-1]
    url = f"{DEBIAN_POOL}/{pool_path}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as err:
        raise RunFailed(f"downloading {url} failed: {err}") from None
    found = sha256_of(target)
    if found != digest:
        raise RunFailed(f"{url}: sha256 {found}, expected {digest}")
    return target


def debian_cuda12(tree: Path) -> None:
    """CUDA 12.4's compiler, headers and libraries from Debian's packages,
    laid out as a CUDA_HOME in `tree` (about 230 MB, of 1 GB downloaded)."""
    if shutil.which("dpkg-deb") is None:
        raise UserError("dpkg-deb not found: the CUDA 12 compiler comes from Debian's packages; "
                        "or set CUDA_HOME to a CUDA 12 toolkit")
    with tempfile.TemporaryDirectory(dir=tree.parent, prefix=".debs-") as work:
        unpacked = Path(work) / "x"
        for pool_path, digest in CUDA12_DEBS.items():
            deb = fetch_deb(pool_path, digest, Path(work))
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True, timeout=600)
            deb.unlink()
        toolkit = unpacked / "usr/lib/nvidia-cuda-toolkit"
        libs = unpacked / "usr/lib/x86_64-linux-gnu"
        for d in ("bin", "nvvm/bin", "nvvm/lib64", "nvvm/libdevice", "lib64/stubs"):
            (tree / d).mkdir(parents=True)
        shutil.copy2(toolkit / "bin/nvcc", tree / "bin")
        shutil.copytree(toolkit / "bin/crt", tree / "bin/crt")
        for tool in ("cudafe++", "fatbinary", "nvlink", "ptxas", "bin2c", "cuobjdump"):
            shutil.copy2(unpacked / "usr/bin" / tool, tree / "bin")
        shutil.copy2(toolkit / "bin/cicc", tree / "nvvm/bin")
        shutil.copy2(toolkit / "libdevice/libdevice.10.bc", tree / "nvvm/libdevice")
        for pattern, where in (("libnvvm.so*", "nvvm/lib64"), ("libcudart.so*", "lib64"),
                               ("libcudart_static.a", "lib64"), ("libcudadevrt.a", "lib64"),
                               ("libculibos.a", "lib64")):
            for library in libs.glob(pattern):
                shutil.copy2(library, tree / where, follow_symlinks=False)
        shutil.copy2(libs / "stubs/libcuda.so", tree / "lib64/stubs")
        shutil.copytree(unpacked / "usr/include", tree / "include", symlinks=True)
        (tree / "bin/nvcc.profile").write_text(NVCC_PROFILE)
        (tree / "version.txt").write_text(f"CUDA Version {CUDA12_TOOLKIT}\n")


def lock_only_pip_env() -> dict[str, str]:
    """pip's environment for installing the lock's pins: a constraint file
    set for pip site-wide (pip.conf's `constraint`) would stand against the
    lock's own pins, and the lock is the constraint here, as it is for uv,
    which reads no pip.conf. Index and mirror settings stay."""
    return {**os.environ, "PIP_CONSTRAINT": os.devnull}  # an empty value keeps the file's


def cuda_toolkit(cache: Path, python: str, cuda_major: int = CUDA_MAJORS[0]) -> Path:
    """The CUDA toolkit Horovod's kernels compile against: $CUDA_HOME when
    set, else the lock's cuda-toolkit[nvcc,cccl] wheels (the CUDA that torch's own
    cuda-toolkit pin names) installed apart from the venv, in the cache, so
    no toolkit ends up in an environment or an image. The wheels ship
    libcudart.so.13 in lib/ only: libcudart.so and lib64/ links give CMake and
    nvcc the names they link."""
    if os.environ.get("CUDA_HOME"):
        home = Path(os.environ["CUDA_HOME"])
        if not (home / "bin" / "nvcc").is_file():
            raise UserError(f"CUDA_HOME={home} has no bin/nvcc")
        return home
    if cuda_major == 12:
        target = cache / f"cuda-{CUDA12_TOOLKIT}-debian"
        if not (target / "COMPLETE").is_file():
            log(f"unpacking CUDA {CUDA12_TOOLKIT}'s compiler from Debian's packages into {target}")
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            debian_cuda12(target)
            (target / "COMPLETE").write_text(f"{CUDA12_TOOLKIT}\n")
        return target
    # nvcc, and CCCL: CUDA's own headers (cuda_fp16.h) include its nv/target.
    # CCCL is torch's own pin (a release of its own, which cuda-toolkit's
    # cccl extra would hold to the toolkit's minor).
    requirement = f"cuda-toolkit[nvcc]=={locked_version('cuda-toolkit')}"
    cccl = f"nvidia-cuda-cccl=={locked_version('nvidia-cuda-cccl')}"
    target = cache / f"cuda-toolkit-{locked_version('cuda-toolkit')}"
    complete = target / "COMPLETE"
    if not complete.is_file() or complete.read_text().split() != [requirement, cccl]:
        log(f"installing the CUDA compiler ({requirement} and {cccl} wheels) into {target}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".cuda-") as tmp:
            result = subprocess.run(
                [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "--target", tmp, "-c", str(LOCK), requirement, cccl],
                env=lock_only_pip_env(), capture_output=True, text=True, timeout=1200)
            if result.returncode != 0:
                detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
                raise RunFailed(f"installing {requirement} failed: {detail}")
            for lib in Path(tmp).glob("nvidia/cu*/lib"):
                for runtime in lib.glob("libcudart.so.*"):
                    (lib / "libcudart.so").symlink_to(runtime.name)
                # nvcc links from lib64 (its nvcc.profile), the wheels fill lib.
                (lib.parent / "lib64").symlink_to("lib")
            (Path(tmp) / "COMPLETE").write_text(f"{requirement}\n{cccl}\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
    homes = sorted(target.glob("nvidia/cu*/bin/nvcc"))
    if not homes:
        raise RunFailed(f"no nvcc in {target}; remove it and run again")
    return homes[0].parent.parent


def nvcc_archs(cuda_home: Path) -> list[str]:
    """The compute capabilities this nvcc compiles for: 75, 80, 90a, ..."""
    result = subprocess.run([str(cuda_home / "bin" / "nvcc"), "--list-gpu-arch"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise RunFailed(f"{cuda_home}/bin/nvcc does not run: {detail}")
    return re.findall(r"compute_(\w+)", result.stdout)


def resolved_cuda_archs(asked: str, info: dict, cuda: str | None) -> str:
    """--cuda-archs as compute capabilities: "torch" becomes the
    architectures torch has native code for (its sm_ entries; compute_
    entries are PTX, which Horovod's newest architecture brings anyway), as
    far as the compiler knows them: the CUDA 12 variant's compiles up to
    sm_90, whose PTX the driver compiles for the later GPUs. `cuda`: the
    build's CUDA release (build_cuda)."""
    if asked != "torch":
        return asked
    # TensorFlow's where the build has no torch (a TensorFlow-only one).
    listed = info.get("torch_archs") or info.get("tensorflow_archs") or []
    archs = [a.removeprefix("sm_") for a in listed if a.startswith("sm_")]
    if not archs:
        raise UserError("--cuda-archs torch: the environment's torch lists no CUDA architectures "
                        "(a CPU build of torch?); name them, e.g. --cuda-archs 80,90")
    if cuda_major(cuda) == 12 and not os.environ.get("CUDA_HOME"):
        archs = [a for a in archs if int(a.rstrip("abcdefghijklmnopqrstuvwxyz"))
                 <= CUDA12_NEWEST_ARCH]
    return ",".join(archs)


def cuda_major(cuda: str | None) -> int:
    """The CUDA major of a framework's CUDA release ("12.8" -> 12); the
    lock's where there is none."""
    return int((cuda or str(CUDA_MAJORS[0])).split(".")[0])


def build_cuda(frameworks: list[str], info: dict) -> str | None:
    """The CUDA release an NCCL build compiles for: torch's, else
    TensorFlow's (their majors must agree: one Horovod, one CUDA runtime);
    a UserError for a framework that is no CUDA build."""
    torch_cuda = info.get("torch_cuda") if "pytorch" in frameworks else None
    tf_cuda = info.get("tensorflow_cuda") if "tensorflow" in frameworks else None
    if "tensorflow" in frameworks and not tf_cuda:
        raise UserError("NCCL GPU operations for TensorFlow need its GPU wheel (tensorflow, a "
                        "CUDA 12 build), and this is a CPU build (tensorflow-cpu): "
                        "scripts/setup.sh --cuda 12 installs the GPU one")
    if torch_cuda and tf_cuda and cuda_major(torch_cuda) != cuda_major(tf_cuda):
        raise UserError(f"torch is a CUDA {torch_cuda} build and TensorFlow a CUDA {tf_cuda} "
                        "one: one Horovod links one CUDA runtime; scripts/setup.sh --cuda "
                        f"{cuda_major(tf_cuda)} installs torch's CUDA {cuda_major(tf_cuda)} build")
    return torch_cuda or tf_cuda


def check_cuda_archs(archs: str, cuda_home: Path) -> None:
    known = nvcc_archs(cuda_home)
    refused = [a for a in archs.split(",") if a not in known]
    if refused:
        raise UserError(f"--cuda-archs {archs}: nvcc in {cuda_home} refuses {','.join(refused)}; "
                        f"it takes {','.join(known)}")


def gpu_present() -> bool:
    listing = first_line(["nvidia-smi", "-L"])
    return bool(listing and listing.startswith("GPU"))


def nccl_tree(nccl_home: Path, workdir: Path) -> Path:
    """Horovod's CMake looks for include/nccl.h and lib/libnccl.so; the NCCL
    wheel that torch depends on ships lib/libnccl.so.2 only. Link a tree
    that has both, so Horovod uses the very NCCL that torch loads."""
    if (nccl_home / "lib" / "libnccl.so").exists():
        return nccl_home
    tree = workdir / "nccl"
    (tree / "lib").mkdir(parents=True)
    (tree / "include").symlink_to(nccl_home / "include")
    (tree / "lib" / "libnccl.so").symlink_to(nccl_home / "lib" / "libnccl.so.2")
    return tree


def plan(args, info: dict) -> tuple[dict, dict]:
    """The build's inputs (what the cache key covers) and its environment."""
    frameworks = args.frameworks
    gpu_ops = args.gpu_ops
    if gpu_ops == "auto":
        gpu_ops = "nccl" if gpu_present() and info.get("torch_cuda") else "none"
    env = {
        "HOROVOD_WITH_GLOO": "1",
        f"HOROVOD_WITH{'OUT' if args.without_mpi else ''}_MPI": "1",
        "HOROVOD_WITHOUT_SPARK": "1",
        "HOROVOD_WITHOUT_RAY": "1",
        "MAKEFLAGS": f"-j{args.jobs}",
        # CMake 4 refuses projects that ask for CMake < 3.5, as the bundled
        # Gloo does, unless told this floor (older CMake ignores it); an
        # environment that brings its own CMake 4 then builds too.
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
        # Horovod's RelWithDebInfo less its -g (our patch release-build): the
        # same optimised code, compiled in less time, in a smaller wheel.
        "HOROVOD_CMAKE_BUILD_TYPE": "Release",
    }
    for name, (_, flag, _) in FRAMEWORKS.items():
        env[f"HOROVOD_WITH{'' if name in frameworks else 'OUT'}_{flag}"] = "1"

    # Without GPU operations the torch extension is compiled for CPU tensors
    # only (our patch's HOROVOD_TORCH_CPU_ONLY), even against a CUDA build of
    # torch: no CUDA toolkit is needed, and a workstation and a CPU image
    # build the same wheel. With NCCL, CUDA is compiled in; the toolkit is
    # looked up only when compiling, so a cached wheel installs without one.
    needs_cuda = gpu_ops == "nccl"
    cuda = build_cuda(frameworks, info) if needs_cuda else None
    if not needs_cuda:
        env["HOROVOD_TORCH_CPU_ONLY"] = "1"
    nccl_version = None
    cuda_archs = resolved_cuda_archs(args.cuda_archs, info, cuda) if needs_cuda else None
    if gpu_ops == "nccl":
        nccl_home = os.environ.get("HOROVOD_NCCL_HOME") or info.get("nccl_home")
        if not nccl_home or not (Path(nccl_home) / "include" / "nccl.h").is_file():
            raise UserError("NCCL GPU operations asked for, but no NCCL was found (install "
                            "torch's nvidia-nccl wheel or set HOROVOD_NCCL_HOME)")
        env.update(HOROVOD_GPU_OPERATIONS="NCCL", HOROVOD_NCCL_LINK="SHARED",
                   HOROVOD_NCCL_HOME=nccl_home, HOROVOD_BUILD_CUDA_CC_LIST=cuda_archs)
        header = (Path(nccl_home) / "include" / "nccl.h").read_text(errors="replace")
        nccl_version = ".".join(re.findall(r"#define NCCL_(?:MAJOR|MINOR|PATCH)\s+(\d+)", header))

    mpi = None if args.without_mpi else first_line(["mpirun", "--version"])
    if mpi is None and not args.without_mpi:
        raise UserError("mpirun not found: install OpenMPI (openmpi-bin libopenmpi-dev; "
                        "scripts/setup.sh does), or build with --without-mpi for Gloo alone")
    compiler = first_line([os.environ.get("CXX", "c++"), "--version"])
    if compiler is None:
        raise UserError("no C++ compiler (c++) found: install build-essential")
    compiler = wheel_cache.without_program(compiler)
    # The compiler of the kernels: CUDA_HOME's, else the lock's wheels.
    toolkit = None
    if needs_cuda:
        toolkit = os.environ.get("CUDA_HOME") or (
            f"cuda-toolkit=={locked_version('cuda-toolkit')}" if cuda_major(cuda) == 13
            else f"nvidia-cuda-toolkit {CUDA12_TOOLKIT} (Debian)")
    patches = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in patch_series()}
    inputs = {
        "horovod": HOROVOD_VERSION,
        "sdist_sha256": SDIST_SHA256,
        "patches": patches,
        "series": list(patches),  # the order they apply in (the key sorts the mapping)
        "abi": info["abi"],
        "machine": info["machine"],
        "frameworks": {f: info["frameworks"][FRAMEWORKS[f][0]] for f in frameworks},
        "gpu_ops": gpu_ops,
        "cuda": cuda,
        "cuda_toolkit": toolkit,
        "cuda_archs": cuda_archs,
        "nccl": nccl_version,
        "mpi": mpi,
        "compiler": compiler,
        "flags": {k: v for k, v in sorted(env.items())
                  if k.startswith("HOROVOD_WITH")
                  or k in ("HOROVOD_TORCH_CPU_ONLY", "HOROVOD_CMAKE_BUILD_TYPE")},
    }
    return inputs, env


def cuda_env(args, inputs: dict) -> dict:
    """CUDA_HOME and friends for the compile, or {} when no CUDA is involved;
    the architectures are checked against nvcc before minutes of compiling."""
    if inputs["gpu_ops"] != "nccl":
        return {}
    cuda_home = cuda_toolkit(args.cache_dir, args.python, cuda_major(inputs["cuda"]))
    check_cuda_archs(inputs["cuda_archs"], cuda_home)
    # Horovod's build asks `nvcc` on the PATH before HOROVOD_CUDA_HOME's.
    path = f"{cuda_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {"CUDA_HOME": str(cuda_home), "CUDAToolkit_ROOT": str(cuda_home),
            "HOROVOD_CUDA_HOME": str(cuda_home), "PATH": path}


def patch_series() -> list[Path]:
    """The patches in the order patches/series lists them (a name a line,
    # comments); a UserError for a name without its file, or a patch the
    series leaves out: each must be placed deliberately."""
    series = PATCH_DIR / "series"
    try:
        names = [line.split("#", 1)[0].strip() for line in series.read_text().splitlines()]
    except OSError as err:
        raise UserError(f"{series}: {err.strerror}") from None
    names = [name for name in names if name]
    missing = [name for name in names if not (PATCH_DIR / name).is_file()]
    if missing:
        raise UserError(f"{series} lists {', '.join(missing)}, which {PATCH_DIR} lacks")
    unlisted = sorted({p.name for p in PATCH_DIR.glob("*.patch")} - set(names))
    if unlisted:
        raise UserError(f"{series} leaves out {', '.join(unlisted)}: list it where it applies")
    return [PATCH_DIR / name for name in names]


def apply_patch(patch: Path, source: Path) -> None:
    """Apply one patch exactly where it was made: no fuzz and no offset (a
    hunk that moved means the patch was made against other code), else a
    RunFailed naming the patch and the hunk."""
    result = subprocess.run(["patch", "-p1", "--forward", "--batch", "--fuzz=0",
                             "--no-backup-if-mismatch", "-i", str(patch)], cwd=source,
                            capture_output=True, text=True)
    said = (result.stdout + result.stderr).splitlines()
    moved = [line.strip() for line in said if "offset" in line or "fuzz" in line]
    if result.returncode != 0 or moved:
        why = (moved or [line.strip() for line in said if line.strip()] or
               [f"exit {result.returncode}"])[-1]
        raise RunFailed(f"{patch.name} does not apply where it was made: {why}")


def cache_key(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def entry_name(key: str) -> str:
    return f"horovod-{HOROVOD_VERSION}-{key}"


def apart_from_frameworks(inputs: dict) -> dict:
    """A build's inputs without its frameworks: their versions and their
    HOROVOD_WITH(OUT)_ flags (and without the build's time)."""
    framework_flags = tuple(f"_{flag}" for _, flag, _ in FRAMEWORKS.values())
    rest = {k: v for k, v in inputs.items() if k not in ("frameworks", "flags", "build_minutes")}
    rest["flags"] = {k: v for k, v in inputs.get("flags", {}).items()
                     if not k.endswith(framework_flags)}
    return rest


def serves(built: dict, wanted: dict) -> bool:
    """Whether a wheel built with `built` inputs serves a setup that wants
    `wanted`: every framework wanted is in it, at the same version, and all
    else is the same. Each framework's binding is a library of its own, loaded
    only when that framework's Horovod module is imported, so the bindings of
    frameworks the environment lacks lie unused."""
    have = built.get("frameworks") or {}
    return (all(have.get(name) == version for name, version in wanted["frameworks"].items())
            and apart_from_frameworks(built) == apart_from_frameworks(wanted))


def recorded_inputs(entry: Path) -> dict:
    try:
        return json.loads((entry / "inputs.json").read_text())
    except (OSError, ValueError):
        return {}


def entry_problem(entry: Path) -> str | None:
    """Why a cache entry cannot be installed (None when it can): one wheel,
    its inputs recorded, and every member of the wheel read back intact (an
    interrupted copy or a full disk leaves a truncated or garbled file)."""
    wheels = sorted(entry.glob("horovod-*.whl"))
    if len(wheels) != 1:
        return f"{len(wheels)} wheels in it" if wheels else "no wheel in it"
    if not recorded_inputs(entry):
        return "its inputs.json is missing or unreadable"
    try:
        with zipfile.ZipFile(wheels[0]) as wheel:
            garbled = wheel.testzip()
    except (OSError, zipfile.BadZipFile) as err:
        return f"{wheels[0].name} does not read as a wheel ({err})"
    if garbled:
        return f"{wheels[0].name}: {garbled} fails its checksum"
    return None


def serving_entry(cache: Path, inputs: dict, key: str) -> Path | None:
    """The cache entry to install: this key's, else the one built for the
    fewest frameworks among those that serve these inputs (a setup for
    PyTorch takes the test command's wheel for all three), newest first. A
    broken entry is said and removed, so that it is built again."""
    exact = cache / entry_name(key)
    built = {e: recorded_inputs(e) for e in cache.glob(entry_name("*"))
             if e != exact and e.is_dir()}
    others = sorted((e for e, recorded in built.items() if serves(recorded, inputs)),
                    key=lambda e: (len(built[e]["frameworks"]), -e.stat().st_mtime))
    for entry in ([exact] if exact.is_dir() else []) + others:
        problem = entry_problem(entry)
        if problem is None:
            return entry
        log(f"the cached wheel in {entry} is broken ({problem}): removing it")
        shutil.rmtree(entry, ignore_errors=True)
    return None


def fetch_sdist(cache: Path, python: str) -> Path:
    sdist = cache / "sdist" / SDIST_NAME
    if sdist.is_file() and sha256_of(sdist) == SDIST_SHA256:
        return sdist
    sdist.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=sdist.parent) as tmp:
        log(f"downloading {SDIST_NAME} from PyPI")
        result = subprocess.run(
            [python, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
             "--no-build-isolation", "-d", tmp, f"horovod=={HOROVOD_VERSION}"],
            capture_output=True, text=True, timeout=600)
        fetched = Path(tmp) / SDIST_NAME
        if result.returncode != 0 or not fetched.is_file():
            detail = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
            raise RunFailed(f"downloading {SDIST_NAME} failed: {detail}")
        if sha256_of(fetched) != SDIST_SHA256:
            raise RunFailed(f"{SDIST_NAME} from PyPI has sha256 {sha256_of(fetched)}, "
                            f"expected {SDIST_SHA256}")
        os.replace(fetched, sdist)
    return sdist


def sha256_of(path: Path) -> str:
    """Read in blocks: a CUDA 12 package is near a gigabyte."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def build_wheel(args, sdist: Path, env: dict, entry: Path, inputs: dict) -> None:
    """Unpack, patch, build; move the wheel into the cache entry at the end,
    so an interrupted build leaves no entry that looks complete."""
    started = time.monotonic()
    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry.parent, prefix=".build-") as tmp:
        work = Path(tmp)
        with tarfile.open(sdist) as tar:
            # The "data" filter refuses links and paths leaving the directory;
            # Pythons before 3.11.4 lack it (and the sdist's hash is checked).
            if hasattr(tarfile, "data_filter"):
                tar.extractall(work, filter="data")
            else:
                tar.extractall(work)  # noqa: S202
        source = work / f"horovod-{HOROVOD_VERSION}"
        for patch in patch_series():
            log(f"applying {patch.name}")
            apply_patch(patch, source)
        if "HOROVOD_NCCL_HOME" in env:
            env = {**env, "HOROVOD_NCCL_HOME": str(nccl_tree(Path(env["HOROVOD_NCCL_HOME"]), work))}
        out = work / "wheel"
        log_path = work / "build.log"
        log(f"building Horovod {HOROVOD_VERSION} ({', '.join(args.frameworks)}; "
            f"{'NCCL' if 'HOROVOD_GPU_OPERATIONS' in env else 'no'} GPU operations), "
            f"-j{args.jobs}; this takes minutes")
        # The environment's own tools first (cmake comes from its "build" extra).
        # Absolute: pip builds in the unpacked sdist, where a relative
        # --python (setup.sh's .venv/bin/python) names nothing.
        tools = Path(args.python).absolute().parent
        path = f"{tools}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"
        with open(log_path, "w") as build_log:
            result = subprocess.run(
                [args.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                 "--verbose", "-w", str(out), str(source)],
                env={**os.environ, **env, "PATH": path}, stdout=build_log,
                stderr=subprocess.STDOUT)
        if result.returncode != 0:
            kept = entry.parent / "last-failed-build.log"
            shutil.copy(log_path, kept)
            # The log's tail first, so that the error stays the last line.
            tail = log_path.read_text(errors="replace").splitlines()[-25:]
            print("\n".join(tail), file=sys.stderr, flush=True)
            raise RunFailed(f"the Horovod build failed (its last lines above); full log: {kept}")
        (wheel,) = out.glob("horovod-*.whl")
        staged = work / "entry"
        staged.mkdir()
        shutil.move(str(wheel), staged / wheel.name)
        minutes = (time.monotonic() - started) / 60
        (staged / "inputs.json").write_text(
            json.dumps({**inputs, "build_minutes": round(minutes, 1)}, indent=2) + "\n")
        os.replace(staged, entry)
        log(f"built {wheel.name} in {minutes:.1f} min -> {entry}")


def install(python: str, entry: Path, prefix: str, inputs: dict) -> None:
    """Install the entry's wheel unless it is installed already; record what
    the environment asked for and which wheel serves it (for --check-only)."""
    record = Path(prefix) / BUILD_RECORD
    (wheel,) = entry.glob("horovod-*.whl")
    key = entry.name.removeprefix(entry_name(""))
    if installed_build(record).get("key") == key:
        check = subprocess.run([python, "-c", "import horovod"], capture_output=True)
        if check.returncode == 0:
            log("already installed")
            relocate_libraries(prefix)
            return
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                    str(wheel)], check=True)
    relocate_libraries(prefix)
    built_for = list(recorded_inputs(entry).get("frameworks") or inputs["frameworks"])
    record.write_text(json.dumps({"key": key, **inputs, "wheel_frameworks": built_for},
                                 indent=2) + "\n")


# Where the frameworks' and CUDA's wheels keep the libraries Horovod's
# bindings link, relative to site-packages.
# (CUDA 13's wheels share nvidia/cu13, CUDA 12's have a folder each.)
LIBRARY_DIRS = ("torch/lib", "tensorflow", "mxnet", "nvidia/cu13/lib", "nvidia/cuda_runtime/lib",
                "nvidia/nccl/lib")


def relocate_libraries(prefix: str) -> None:
    """A wheel's libraries carry the RUNPATH of the environment they were
    built in (its absolute site-packages, the build's NCCL and CUDA trees),
    which another environment, or an image, sharing the cached wheel does
    not have. Point them at the
    frameworks' libraries relative to themselves ($ORIGIN), so each library
    loads, and `ldd` resolves it, in whatever environment it is installed."""
    if shutil.which("patchelf") is None:
        raise UserError("patchelf not found (apt-get install patchelf; setup.sh installs it)")
    for library in Path(prefix).glob("lib/python*/site-packages/horovod/**/*.so"):
        site = next(p for p in library.parents if p.name == "site-packages")
        up = os.path.relpath(site, library.parent)
        current = subprocess.run(["patchelf", "--print-rpath", str(library)], capture_output=True,
                                 text=True, check=True).stdout.strip()
        # The system's (OpenMPI's) stay; the build's own places go.
        kept = [d for d in current.split(":") if d.startswith(("/usr/", "/lib"))]
        ours = [f"$ORIGIN/{up}/{d}" for d in LIBRARY_DIRS if (site / d).is_dir()]
        wanted = ":".join(dict.fromkeys(kept + ours))
        if wanted != current:
            subprocess.run(["patchelf", "--set-rpath", wanted, str(library)], check=True)


def installed_build(record: Path) -> dict:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return {}


def check_build(python: str, frameworks: list[str], gpu_ops: str,
                nccl_home: str | None = None, mpi: bool = True) -> str:
    """Run `horovodrun --check-build`; fail unless it shows what was asked for.
    An NCCL build loads the NCCL of torch's wheel, which the loader must find."""
    horovodrun = Path(python).parent / "horovodrun"
    command = [str(horovodrun)] if horovodrun.exists() else [python, "-m", "horovod.runner.launch"]
    env = dict(os.environ)
    if gpu_ops == "nccl" and nccl_home:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(Path(nccl_home) / "lib"), env.get("LD_LIBRARY_PATH")]))
    result = subprocess.run([*command, "--check-build"], capture_output=True, text=True,
                            timeout=300, env=env)
    report = result.stdout
    wanted = [FRAMEWORKS[f][2] for f in frameworks] + ["MPI"] * mpi + ["Gloo"]
    if gpu_ops == "nccl":
        wanted.append("NCCL")
    missing = [w for w in wanted if not re.search(rf"\[X\] {w}\b", report)]
    if result.returncode != 0 or missing:
        print(f"{report}{result.stderr}", end="", file=sys.stderr, flush=True)
        raise RunFailed(f"horovodrun --check-build lacks {', '.join(missing) or '?'} "
                        "(its report above)")
    return report


def unresolved_libraries(prefix: str, frameworks: list[str]) -> list[str]:
    """What the installed Horovod's shared libraries need and the loader
    cannot find, as `ldd` says; the driver's libcuda.so.1 comes from the
    host (the NVIDIA container runtime mounts it), so it may be missing.
    The bindings of frameworks the environment was not set up for (a wheel
    built for more serves it) are not its to load."""
    unused = [FRAMEWORKS[f][0] for f in FRAMEWORKS if f not in frameworks]
    libraries = sorted(library for library in
                       Path(prefix).glob("lib/python*/site-packages/horovod/**/*.so")
                       if not any(f"horovod/{name}/" in library.as_posix() for name in unused))
    if not libraries:
        raise RunFailed(f"no Horovod libraries under {prefix}")
    missing = []
    for library in libraries:
        result = subprocess.run(["ldd", str(library)], capture_output=True, text=True, timeout=60)
        for line in result.stdout.splitlines():
            name = line.strip().split(" ")[0]
            if "not found" in line and name != "libcuda.so.1":
                missing.append(f"{library.name}: {name}")
    return missing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="build_horovod.sh",
        description=f"Build Horovod {HOROVOD_VERSION} from its sdist with the project's patches "
                    "for the given Python environment, cache the wheel, install it.")
    parser.add_argument("--python", default=os.environ.get("HVT_PYTHON", "python3"),
                        help="Python of the environment to build for and install into")
    parser.add_argument("--frameworks", default="pytorch",
                        help="comma-separated: pytorch, tensorflow, mxnet")
    parser.add_argument("--gpu-ops", choices=["auto", "nccl", "none"], default="auto",
                        help="NCCL GPU operations; auto means when a GPU is present")
    parser.add_argument("--without-mpi", action="store_true",
                        help="build without MPI, for hosts with no Open MPI: the ranks start "
                             "over Gloo alone (horovodrun --gloo)")
    parser.add_argument("--cuda-archs", default=DEFAULT_CUDA_ARCHS,
                        help="compute capabilities of the CUDA kernels (NCCL builds), e.g. "
                             "80,90; default torch: every one the environment's torch has "
                             "native code for")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                        help="wheel cache (env HVT_WHEEL_CACHE)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-install", action="store_true", help="build or find the wheel only")
    parser.add_argument("--print-key", action="store_true", help="print the cache key and exit")
    parser.add_argument("--check-only", action="store_true",
                        help="only check that the Horovod installed in the environment has "
                             "what it was built for")
    args = parser.parse_args(argv)
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = [f for f in args.frameworks if f not in FRAMEWORKS]
    if unknown or not args.frameworks:
        parser.error(f"--frameworks takes {', '.join(FRAMEWORKS)}; got {args.frameworks}")

    if args.check_only:
        info = probe_python(args.python, [])
        built = installed_build(Path(info["prefix"]) / BUILD_RECORD)
        if not built:
            raise UserError(f"no Horovod build recorded in {info['prefix']}; run scripts/setup.sh")
        print(check_build(args.python, list(built["frameworks"]), built["gpu_ops"],
                          info.get("nccl_home"), mpi=built.get("mpi") is not None), end="")
        missing = unresolved_libraries(info["prefix"], list(built["frameworks"]))
        if missing:
            raise RunFailed("Horovod's libraries need what the loader cannot find: "
                            + "; ".join(missing))
        print("Every library Horovod links resolves (libcuda.so.1 aside: the host's driver).")
        return 0
    info = probe_python(args.python, args.frameworks)
    inputs, env = plan(args, info)
    key = cache_key(inputs)
    if args.print_key:
        print(key)
        return 0
    with wheel_cache.compiling_alone(args.cache_dir, "horovod", log):
        entry = serving_entry(args.cache_dir, inputs, key)
        if entry is None:
            entry = args.cache_dir / entry_name(key)
            env = {**env, **cuda_env(args, inputs)}
            build_wheel(args, fetch_sdist(args.cache_dir, args.python), env, entry, inputs)
        else:
            built_for = ", ".join(recorded_inputs(entry)["frameworks"])
            log(f"cached wheel in {entry} (built for {built_for})")
    if args.no_install:
        return 0
    install(args.python, entry, info["prefix"], inputs)
    print(check_build(args.python, args.frameworks, inputs["gpu_ops"], info.get("nccl_home"),
                      mpi=not args.without_mpi), end="")
    return 0


def run_main(argv: list[str]) -> None:
    """horovod_train.core.errors.run_main's convention, by hand (see UserError)."""
    try:
        code = main(argv)
    except UserError as err:
        print(f"build_horovod: error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    except RunFailed as err:
        print(f"build_horovod: error: {err}", file=sys.stderr, flush=True)
        sys.exit(1)
    except subprocess.CalledProcessError as err:
        print(f"build_horovod: error: {' '.join(map(str, err.cmd))} exited {err.returncode}",
              file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print("build_horovod: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)
    sys.exit(code or 0)


if __name__ == "__main__":
    run_main(sys.argv[1:])
