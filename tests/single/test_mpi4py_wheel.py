"""mpi4py's kept wheel: keyed by what the compile depends on (the compiler by
its version, whatever OMPI_CC calls it), a cut wheel never served, the
environment that has the locked mpi4py left as it is, and one compile at a
time in a cache."""

import importlib.util
import subprocess
import sys
import time
import zipfile

from conftest import REPO

ENV_DIR = REPO / "docker" / "env"
spec = importlib.util.spec_from_file_location("mpi4py_wheel", ENV_DIR / "mpi4py_wheel.py")
mpi4py_wheel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mpi4py_wheel)

BOOKWORM = {"mpi4py": "4.1.2", "abi": "cpython-311-x86_64-linux-gnu", "machine": "x86_64",
            "libc": "glibc 2.36", "mpi": "mpirun (Open MPI) 4.1.4",
            "compile": "-I/usr/lib/x86_64-linux-gnu/openmpi/include -lmpi",
            "compiler": mpi4py_wheel.without_program("gcc (Debian 12.2.0-14) 12.2.0")}


def test_the_key_follows_open_mpi_python_and_the_compiler_not_its_name():
    entry = mpi4py_wheel.entry_name("4.1.2", BOOKWORM)
    assert entry.startswith("mpi4py-4.1.2-")
    # The image's OMPI_CC=gcc-12 is the host's gcc.
    assert entry == mpi4py_wheel.entry_name("4.1.2", {
        **BOOKWORM, "compiler": mpi4py_wheel.without_program("gcc-12 (Debian 12.2.0-14) 12.2.0")})
    for other in ({"mpi": "mpirun (Open MPI) 4.1.2"}, {"abi": "cpython-312-x86_64-linux-gnu"},
                  {"libc": "glibc 2.35"}, {"compile": "-I/opt/openmpi/include -lmpi"}):
        assert mpi4py_wheel.entry_name("4.1.2", {**BOOKWORM, **other}) != entry, other


def test_a_cut_wheel_is_not_served(tmp_path):
    entry = tmp_path / "mpi4py-4.1.2-key"
    entry.mkdir()
    wheel = entry / "mpi4py-4.1.2-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as whole:
        whole.writestr("mpi4py/__init__.py", "x" * 10_000)
    assert mpi4py_wheel.intact_wheel(entry) == wheel
    wheel.write_bytes(wheel.read_bytes()[:-200])
    assert mpi4py_wheel.intact_wheel(entry) is None


def test_an_environment_with_the_locked_mpi4py_needs_no_wheel(tmp_path):
    """Nothing printed, nothing compiled (setup.sh run again, the image's
    second setup); a lock that pins none is one line."""
    script = [sys.executable, str(ENV_DIR / "mpi4py_wheel.py"), "--python", sys.executable,
              "--cache-dir", str(tmp_path / "cache")]
    done = subprocess.run([*script, "--lock", str(ENV_DIR / "constraints.txt")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done
    assert not (tmp_path / "cache").exists()
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==2.0\n")
    refused = subprocess.run([*script, "--lock", str(lock)], capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 2
    assert refused.stderr == f"mpi4py_wheel: error: the lock {lock} pins no mpi4py\n"


def test_a_second_setup_waits_for_the_first_compile_and_takes_its_wheel(tmp_path):
    """Two setups at once on one machine (an image's build beside the
    host's): the second waits while the first compiles, then serves the
    first's wheel, compiling nothing."""
    python = tmp_path / "venv" / "bin" / "python"  # a Python without mpi4py
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, timeout=60)
    lock = ENV_DIR / "constraints.txt"
    version = mpi4py_wheel.locked_version(lock)
    cache = tmp_path / "cache"
    entry = cache / mpi4py_wheel.entry_name(version, mpi4py_wheel.inputs(str(python), version))
    said = tmp_path / "second.err"
    with mpi4py_wheel.wheel_cache.compiling_alone(cache, "mpi4py", print):
        with said.open("w") as err:
            second = subprocess.Popen(
                [sys.executable, str(ENV_DIR / "mpi4py_wheel.py"), "--python", str(python),
                 "--lock", str(lock), "--cache-dir", str(cache)],
                stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + 30
        while "waiting for it" not in said.read_text():
            assert second.poll() is None and time.monotonic() < deadline, said.read_text()
            time.sleep(0.05)
        # The first's compile ends: its wheel lands in the cache.
        entry.mkdir(parents=True)
        wheel = entry / f"mpi4py-{version}-cp311-cp311-linux_x86_64.whl"
        with zipfile.ZipFile(wheel, "w") as whole:
            whole.writestr("mpi4py/__init__.py", "")
    out, _ = second.communicate(timeout=30)
    assert second.returncode == 0, said.read_text()
    assert out == f"{wheel}\n"
    assert said.read_text() == (f"mpi4py_wheel: another process is compiling mpi4py into "
                                f"{cache}: waiting for it\n")
