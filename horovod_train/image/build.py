"""Build the training image, `docker build docker/` as users type it, with
podman (or docker): the GPU variant (default) or the CPU one; with --app,
the image that carries the code (`docker build -f docker/app.Dockerfile .`)
on top of the GPU one.

With podman, everything the build needs comes from this machine, so it also
works where no registry but PyPI and Debian's mirrors can be reached:
  - the base image (the Dockerfile's default is debian:bookworm) is Debian
    bookworm made with debootstrap and imported
    (localhost/debian-base:bookworm), once;
  - Python packages, the CUDA compiler's wheels and Horovod's sdist come
    from one wheelhouse for both variants, filled by `pip download` from the
    lock (docker/env/constraints.txt), kept outside the checkout, keyed by it;
  - Horovod's wheel cache is mounted (WHEEL_CACHE), so
    docker/env/build_horovod.sh inside the build takes a wheel built before
    with the same inputs (by a local setup or an earlier image build), and
    leaves there the wheel it builds.
podman also reuses the layers of an earlier build whose inputs are
unchanged, and the two variants share every layer up to PyTorch's stack.
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
import tempfile
import time
from pathlib import Path

from horovod_train.core.errors import ArgumentParser, RunFailed, UserError, run_main
from horovod_train.gpu import nvidia_driver

REPO = Path(__file__).resolve().parents[2]  # the checkout
CONTEXT = REPO / "docker"  # the build context, as in `docker build docker/`
APP_DOCKERFILE = CONTEXT / "app.Dockerfile"  # its context: the repository root


def load_recipe_module(path: Path):
    """A module of the environment recipe (docker/env), which the image's
    build runs as a file: loaded from its path, not from the package."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The recipe's wheel cache, lock and sdist: one source for the host and the image.
build_horovod = load_recipe_module(CONTEXT / "env" / "build_horovod.py")

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "horovod-train"
DEBIAN_BASE = "localhost/debian-base:bookworm"
MIN_FREE_GB = 10
COLD_BUILD_GB = 35
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def log(message: str) -> None:
    print(f"build_image: {message}", file=sys.stderr, flush=True)


def run(*command: str, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, check=True, **kwargs)
    except FileNotFoundError:
        raise UserError(f"{command[0]} not found") from None
    except subprocess.CalledProcessError as err:
        raise RunFailed(f"{' '.join(command[:3])} ... exited {err.returncode}") from None


def ensure_tools(engine: str, need_debootstrap: bool) -> None:
    """podman/buildah/debootstrap from Debian's packages when missing and root."""
    needed = [engine, "debootstrap"] if need_debootstrap else [engine]
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if not missing:
        return
    if engine == "docker" or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise UserError(f"{', '.join(missing)} not found: install it")
    packages = ["podman", "buildah", "debootstrap"]
    log(f"installing {' '.join(packages)}")
    run("apt-get", "update", "-qq", stdout=subprocess.DEVNULL)
    run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)


def image_id(engine: str, image: str) -> str | None:
    found = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", image],
                           capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


def remove_superseded(engine: str, image: str) -> None:
    """Remove an untagged image of an earlier build and the untagged parents
    only it used (its step images, which share its multi-GB layers); stops at
    anything tagged or still used by another image or a container."""
    while image:
        found = subprocess.run([engine, "image", "inspect", "--format",
                                "{{len .RepoTags}} {{.Parent}}", image],
                               capture_output=True, text=True)
        if found.returncode != 0:
            return
        tags, _, parent = found.stdout.strip().partition(" ")
        if tags != "0" or subprocess.run([engine, "rmi", image], capture_output=True).returncode:
            return
        image = parent


def debian_base(engine: str) -> str:
    """Debian bookworm as a local image, made with debootstrap (no registry)."""
    if image_id(engine, DEBIAN_BASE):
        return DEBIAN_BASE
    log(f"making {DEBIAN_BASE} with debootstrap (about a minute)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="debian-base-") as tmp:
        root = Path(tmp) / "rootfs"
        run("debootstrap", "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR,
            stdout=subprocess.DEVNULL)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        run(engine, "import", "-", DEBIAN_BASE, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise RunFailed("tar of the debootstrap tree failed")
    log(f"made {DEBIAN_BASE} in {time.monotonic() - started:.0f} s")
    return DEBIAN_BASE


def wheelhouse(python: str, cuda: int = build_horovod.CUDA_MAJORS[0]) -> Path:
    """Every pinned package of the lock of torch's CUDA major as wheels
    (mpi4py and Horovod as their sources, compiled in the build), keyed by
    the lock; CUDA 13's serves both variants."""
    lock = build_horovod.lock.lock_text(cuda)
    kind = f"wheelhouse-cuda{cuda}-"
    house = CACHE / f"{kind}{hashlib.sha256(lock.encode()).hexdigest()[:12]}"
    if (house / "COMPLETE").is_file():
        return house
    pins = [line for line in lock.splitlines() if line.strip() and not line.startswith("#")]
    log(f"filling the wheelhouse {house} ({len(pins)} packages)")
    started = time.monotonic()
    # A few GB each: the current lock's only, for each CUDA. A lock that
    # changed a few pins starts from the last wheelhouse (pip download skips
    # the files it has) and drops the wheels no pin names any more.
    # (Wheelhouses named before the CUDA variant, wheelhouse-HASH, are CUDA 13's.)
    mine = [p for p in CACHE.glob("wheelhouse-*") if p.name.startswith(kind) or (
        cuda == build_horovod.CUDA_MAJORS[0] and not p.name.startswith("wheelhouse-cuda"))]
    previous = sorted(mine, key=lambda p: p.stat().st_mtime)
    for stale in previous[:-1]:
        shutil.rmtree(stale)
    if previous and previous[-1] != house:
        (previous[-1] / "COMPLETE").unlink(missing_ok=True)
        previous[-1].rename(house)
    house.mkdir(parents=True, exist_ok=True)
    wanted = {pin_file_prefix(p) for p in pins} | {
        pin_file_prefix(f"horovod=={build_horovod.HOROVOD_VERSION}")}
    for old in house.iterdir():
        if not any(file_key(old.name).startswith(prefix) for prefix in wanted):
            old.unlink()
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as requirements:
        requirements.write("\n".join(p for p in pins if not p.startswith("mpi4py==")) + "\n")
        requirements.flush()
        run(python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
            "-d", str(house), "-r", requirements.name, stdout=sys.stderr,
            env=build_horovod.lock_only_pip_env())
    mpi4py = next(p for p in pins if p.startswith("mpi4py=="))
    horovod = f"horovod=={build_horovod.HOROVOD_VERSION}"
    # Their sources alone: pip still prepares each one's metadata in a build
    # environment, whose setuptools and Cython are taken as wheels (":all:"
    # would compile them too, minutes on a cold machine).
    run(python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "mpi4py,horovod",
        "-d", str(house), mpi4py, horovod, stdout=sys.stderr,
        env=build_horovod.lock_only_pip_env())
    (house / "COMPLETE").write_text(lock)
    log(f"filled the wheelhouse in {time.monotonic() - started:.0f} s")
    return house


def file_key(text: str) -> str:
    """Lower case, every run of - _ . as one _: 'PyYAML-6.0.2' and
    'pyyaml_6.0.2' become 'pyyaml_6_0_2'."""
    return re.sub(r"[-_.]+", "_", text).lower()


def pin_file_prefix(pin: str) -> str:
    """'PyYAML==6.0.2' -> how its wheel's or sdist's file name starts, as
    file_key writes both; a pin's environment marker ('; python_version ...')
    is no part of it."""
    name, _, version = pin.split(";")[0].strip().partition("==")
    return file_key(f"{name}-{version}") + "_"


def check_free_space(engine: str) -> None:
    """Both variants built from scratch peaked at about 24 GB of podman's
    storage (PyTorch's layer, ~6 GB, unpacked while it is committed); a build
    that reuses its layers needs little. Too little even for that is an
    error; less than a cold build needs is a warning. A rebuild removes the
    images it supersedes as soon as they are, so storage holds one
    generation of them (~10 GB for both) between builds."""
    root = run(engine, "info", "--format", "{{.Store.GraphRoot}}",
               capture_output=True, text=True).stdout.strip()
    free = shutil.disk_usage(root).free / 1e9
    hint = f"free space, or remove old images: {engine} image prune -a"
    if free < MIN_FREE_GB:
        raise UserError(f"{free:.0f} GB free under {root}, the build needs {MIN_FREE_GB} GB "
                        f"even with its layers cached ({hint})")
    if free < COLD_BUILD_GB:
        log(f"warning: {free:.0f} GB free under {root}; a build without cached layers "
            f"needs about {COLD_BUILD_GB} GB ({hint})")


def pick_engine() -> str:
    """podman where it is installed; docker where its daemon answers; else
    podman, which ensure_tools installs: a docker client with no daemon
    behind it (as on CI machines) builds nothing."""
    if shutil.which("podman"):
        return "podman"
    if shutil.which("docker"):
        try:
            if subprocess.run(["docker", "info"], capture_output=True,
                              timeout=30).returncode == 0:
                return "docker"
        except subprocess.TimeoutExpired:
            pass
    return "podman"


# chroot isolation: RUN steps need no container runtime or cgroups; docker
# format: OCI images drop the Dockerfile's SHELL (pipefail). --force-rm: a
# failed step leaves no multi-GB working container.
PODMAN_FLAGS = ["--isolation", "chroot", "--layers", "--format", "docker", "--force-rm"]


def environment_build(args, engine: str) -> tuple[list[str], Path]:
    """docker/Dockerfile's build, and its context: docker/."""
    podman = engine == "podman"
    command = [engine, "build", "-t", args.tag, "--build-arg", f"DEVICE={args.device}",
               "--build-arg", f"CUDA={args.cuda}", "--build-arg", f"KERAS={args.keras}"]
    base = args.base_image or (debian_base(engine) if podman else None)
    if base:
        command += ["--build-arg", f"BASE_IMAGE={base}"]
    if podman:
        command += PODMAN_FLAGS
        check_free_space(engine)
        # The cache that setup.sh fills, wherever HVT_WHEEL_CACHE puts it.
        wheel_cache = build_horovod.default_cache_dir()
        wheel_cache.mkdir(parents=True, exist_ok=True)
        command += ["-v", f"{wheel_cache}:/wheel-cache", "--build-arg", "WHEEL_CACHE=/wheel-cache",
                    "-v", f"{wheelhouse(args.python, args.cuda)}:/wheelhouse:ro"]
    return command, CONTEXT


def app_build(args, engine: str) -> tuple[list[str], Path]:
    """docker/app.Dockerfile's build on the environment image, and its
    context: the repository root."""
    base = args.base_image or "localhost/horovod-train:gpu"
    if not image_id(engine, base):
        raise UserError(f"no image {base} to build on: build it first (scripts/build_image.sh), "
                        "or name another with --base-image")
    command = [engine, "build", "-t", args.tag, "-f", str(APP_DOCKERFILE),
               "--build-arg", f"BASE_IMAGE={base}"]
    return command + (PODMAN_FLAGS if engine == "podman" else []), REPO


def build(args) -> None:
    engine = args.engine or pick_engine()
    ensure_tools(engine, need_debootstrap=engine == "podman" and not args.base_image
                 and not args.app)
    command, context = (app_build if args.app else environment_build)(args, engine)
    started = time.monotonic()
    log(" ".join(command + [str(context)]))
    old = image_id(engine, args.tag)
    run(*command, str(context))
    if old and image_id(engine, args.tag) != old:
        remove_superseded(engine, old)
    info = json.loads(run(engine, "image", "inspect", args.tag, capture_output=True,
                          text=True).stdout)[0]
    log(f"built {args.tag} in {(time.monotonic() - started) / 60:.1f} min, "
        f"{info['Size'] / 1e9:.2f} GB")


def cuda_for_this_host() -> int:
    """The GPU image's CUDA major by this host's NVIDIA driver, as setup
    chooses (docker/env/nvidia_driver.py), said in a line where it is not
    the newest; the newest where there is no driver."""
    try:
        major, why = nvidia_driver.choose_cuda(
            nvidia_driver.driver_version(), doing="building the CUDA {major} image",
            otherwise="build the CPU image (--device cpu), or give --cuda for the hosts "
                      "that will run it")
    except ValueError as err:
        raise UserError(str(err)) from None
    if why:
        log(why)
    return major or build_horovod.CUDA_MAJORS[0]


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="build_image.sh", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--cuda", type=int, choices=build_horovod.CUDA_MAJORS, default=None,
                        help="torch's CUDA major in the GPU image: 13, or 12 for drivers "
                             "before R580 (default tag localhost/horovod-train:gpu-cuda12); "
                             "default: what this host's NVIDIA driver runs, else 13")
    parser.add_argument("--keras", choices=["3", "2"], default="3",
                        help="tf.keras in the CPU image: 3, TensorFlow's own, or 2, tf-keras, "
                             "for Keras 2 scripts (default tag localhost/horovod-train:cpu-keras2)")
    parser.add_argument("--app", action="store_true",
                        help="the image that carries the code (docker/app.Dockerfile, context: "
                             "the repository root) on top of the GPU image "
                             "(localhost/horovod-train:gpu, or --base-image)")
    parser.add_argument("--tag", default=None,
                        help="image name (default localhost/horovod-train:DEVICE, or :app)")
    parser.add_argument("--engine", choices=["podman", "docker"], default=None,
                        help="default: podman if installed, else docker")
    parser.add_argument("--base-image", default=None,
                        help="base image (default: the Dockerfile's debian:bookworm; with podman "
                             "the same made here with debootstrap; --app: "
                             "localhost/horovod-train:gpu)")
    parser.add_argument("--python", default=sys.executable,
                        help="Python whose pip fills the wheelhouse")
    parser.add_argument("--wheelhouse-only", action="store_true",
                        help="fill the wheelhouse (every pinned package) and print its path; "
                             "scripts/test.sh sets up the checkout's venv from it too")
    args = parser.parse_args(argv)
    if args.cuda is None:
        args.cuda = cuda_for_this_host() if args.device == "gpu" and not args.app \
            else build_horovod.CUDA_MAJORS[0]
    if args.cuda != build_horovod.CUDA_MAJORS[0] and (args.app or args.device != "gpu"):
        parser.error(f"--cuda {args.cuda} is for the GPU image (--device gpu)")
    if args.keras == "2" and (args.app or args.device != "cpu"):
        parser.error("--keras 2 is for the CPU image (--device cpu), the one with TensorFlow")
    if args.wheelhouse_only:
        print(wheelhouse(args.python, args.cuda))
        return 0
    default_tag = "app" if args.app else args.device
    if args.cuda != build_horovod.CUDA_MAJORS[0]:
        default_tag += f"-cuda{args.cuda}"
    if args.keras == "2":
        default_tag += "-keras2"
    args.tag = args.tag or f"localhost/horovod-train:{default_tag}"
    build(args)
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog="build_image")


if __name__ == "__main__":
    cli()
