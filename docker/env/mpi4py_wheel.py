"""mpi4py compiled against this machine's Open MPI, once: the wheel is kept in
the wheel cache (beside Horovod's) under a key of what the compile depends
on, and later setups with the same key take it instead of compiling again
(minutes of one core). The image's build mounts that cache, so an image on
the same distribution as the machine that ran scripts/setup.sh takes that
machine's wheel; any other gets a key, and a compile, of its own.

    mpi4py_wheel.py --python VENV_PYTHON --lock CONSTRAINTS [--cache-dir DIR]

Prints the wheel's path, or nothing where the environment has the locked
mpi4py already (setup.sh run again, the image's second setup). Standard
library only: setup.sh runs it before the
venv has anything but pip, in the image's first layers too.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Loaded by path: this file is run as a script, or loaded by path itself (the tests).
_spec = importlib.util.spec_from_file_location(
    "wheel_cache", Path(__file__).resolve().parent / "wheel_cache.py")
wheel_cache = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheel_cache)
first_line = wheel_cache.first_line
without_program = wheel_cache.without_program
default_cache_dir = wheel_cache.default_cache_dir


class UserError(Exception):
    """Bad input or a missing tool: one line, exit 2."""


def log(message: str) -> None:
    print(f"mpi4py_wheel: {message}", file=sys.stderr, flush=True)


def locked_version(lock: Path) -> str:
    try:
        text = lock.read_text()
    except OSError as err:
        raise UserError(f"cannot read the lock {lock}: {err.strerror}") from None
    found = re.search(r"^mpi4py==([^\s;#]+)", text, re.MULTILINE)
    if not found:
        raise UserError(f"the lock {lock} pins no mpi4py")
    return found[1]


def installed_version(python: str) -> str | None:
    return first_line([python, "-c", "import importlib.metadata as m; print(m.version('mpi4py'))"])


def inputs(python: str, version: str) -> dict:
    """What the compiled wheel depends on: the Python ABI, the machine and
    its C library, Open MPI's release and the compile line its wrapper
    gives (headers, libraries), and the compiler behind it."""
    abi = first_line([python, "-c", "import sysconfig; print(sysconfig.get_config_var('SOABI'))"])
    if abi is None:
        raise UserError(f"{python} does not run")
    mpi = first_line(["mpirun", "--version"])
    showme = first_line(["mpicc", "-showme"])
    compiler = first_line(["mpicc", "--version"])
    if mpi is None or showme is None or compiler is None:
        raise UserError("mpirun or mpicc not found: install OpenMPI (openmpi-bin libopenmpi-dev; "
                        "scripts/setup.sh does)")
    return {"mpi4py": version, "abi": abi, "machine": platform.machine(),
            "libc": " ".join(platform.libc_ver()), "mpi": mpi,
            "compile": without_program(showme), "compiler": without_program(compiler)}


def entry_name(version: str, wanted: dict) -> str:
    key = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]
    return f"mpi4py-{version}-{key}"


def intact_wheel(entry: Path) -> Path | None:
    """The entry's one wheel, if it reads back whole (an interrupted copy or
    a full disk leaves a truncated file)."""
    wheels = sorted(entry.glob("mpi4py-*.whl"))
    if len(wheels) != 1:
        return None
    try:
        with zipfile.ZipFile(wheels[0]) as wheel:
            return None if wheel.testzip() else wheels[0]
    except (OSError, zipfile.BadZipFile):
        return None


def build(python: str, version: str, wanted: dict, entry: Path) -> Path:
    """pip's wheel of the sdist (pip's own settings: PIP_FIND_LINKS,
    PIP_NO_INDEX, PIP_INDEX_URL, PIP_CERT), moved into the cache at the end,
    so an interrupted build leaves no entry that looks complete."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    log(f"compiling mpi4py {version} against {wanted['mpi']} (minutes, once)")
    with tempfile.TemporaryDirectory(dir=entry.parent, prefix=".build-") as tmp:
        staged = Path(tmp) / "entry"
        result = subprocess.run(
            [python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--no-binary", "mpi4py", "-w", str(staged), f"mpi4py=={version}"],
            stdout=sys.stderr)
        if result.returncode != 0:
            raise RuntimeError(f"compiling mpi4py {version} failed (pip's message above)")
        (staged / "inputs.json").write_text(json.dumps(wanted, indent=2) + "\n")
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(staged, entry)
    wheel = intact_wheel(entry)
    if wheel is None:
        raise RuntimeError(f"pip left no mpi4py wheel in {entry}")
    return wheel


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mpi4py_wheel.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="Python of the environment it is for")
    parser.add_argument("--lock", type=Path, required=True, help="the lock that pins mpi4py")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                        help="wheel cache (env HVT_WHEEL_CACHE)")
    args = parser.parse_args(argv)
    version = locked_version(args.lock)
    if installed_version(args.python) == version:
        return 0
    wanted = inputs(args.python, version)
    entry = args.cache_dir / entry_name(version, wanted)
    with wheel_cache.compiling_alone(args.cache_dir, "mpi4py", log):
        wheel = intact_wheel(entry) or build(args.python, version, wanted, entry)
    print(wheel)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (UserError, OSError) as err:
        print(f"mpi4py_wheel: error: {err}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as err:
        print(f"mpi4py_wheel: error: {err}", file=sys.stderr)
        sys.exit(1)
