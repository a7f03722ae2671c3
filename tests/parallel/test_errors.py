"""run_main, the one error convention of every entry point: bad input is
one line and exit 2, a run that started and failed one line and exit 1,
Ctrl-C exit 130; otherwise the entry point's own exit code. Each case runs
a real process, as a user would."""

import signal
import subprocess
import sys

import pytest
from conftest import REPO

ENTRY_POINT = """
import sys, time
from horovod_train.core.errors import RunFailed, UserError, run_main

def main():
    what = sys.argv[1]
    if what == "bad-input":
        raise UserError("--epochs 0: must be at least 1")
    if what == "run-failed":
        raise RunFailed("horovodrun exited 1")
    if what == "wait":
        print("waiting", flush=True)
        time.sleep(60)
    return int(what)

run_main(main, prog="tool")
"""


def entry_point(what: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ENTRY_POINT, what], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("what, code, line", [
    ("bad-input", 2, "tool: error: --epochs 0: must be at least 1"),
    ("run-failed", 1, "tool: error: horovodrun exited 1"),
])
def test_an_error_is_one_line_and_its_exit_code(what, code, line):
    result = entry_point(what)
    assert result.returncode == code
    assert result.stderr == line + "\n"
    assert result.stdout == ""


@pytest.mark.parametrize("code", [0, 1, 3])
def test_the_entry_points_own_exit_code_passes_through(code):
    result = entry_point(str(code))
    assert (result.returncode, result.stderr) == (code, "")


def test_ctrl_c_is_exit_130():
    # A shell's background job starts with SIGINT ignored, and Python then
    # leaves it so: the child gets the disposition a terminal would give it.
    process = subprocess.Popen([sys.executable, "-c", ENTRY_POINT, "wait"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert process.stdout.readline() == "waiting\n"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130
    assert stderr == "tool: interrupted\n"


AT_ONCE = """
import atexit, sys, threading, time
from horovod_train.core.errors import UserError, run_main

def failing_handler():
    raise RuntimeError("Horovod has been shut down")

def main():
    # Registered first, run last (MXNet's registers at import).
    atexit.register(failing_handler)
    atexit.register(lambda: print("exit handler ran", flush=True))
    # A thread still working: a normal exit waits for it, and so must this one.
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread done", flush=True))).start()
    if sys.argv[1] == "bad-input":
        raise UserError("--epochs 0: must be at least 1")
    if sys.argv[1] == "0":
        atexit.unregister(failing_handler)
    return int(sys.argv[1])

run_main(main, prog="trainer", exit_at_once=True)
"""


@pytest.mark.parametrize("what, code", [("0", 0), ("3", 3), ("bad-input", 2)])
def test_ending_at_once_still_runs_what_a_normal_exit_runs(what, code):
    """The trainers end without the interpreter's teardown, but as a normal
    exit would otherwise: other threads finished, exit handlers run, the
    convention's code."""
    result = subprocess.run([sys.executable, "-c", AT_ONCE, what], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == code
    assert result.stdout == "thread done\nexit handler ran\n"
    # A failed run's one line stays its only one: an exit handler that then
    # fails (MXNet's, once Horovod has shut down) adds no traceback.
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
