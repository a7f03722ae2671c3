"""The cost table's own CPU seconds (tests/cpu_account.py): what this run's
processes use, a detached one's too (as sshd's ranks and Slurm's tasks
are), and nothing once the run has left its group."""

import subprocess
import sys
import time

import conftest
import pytest
from conftest import REPO

BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"


@pytest.fixture
def account():
    if conftest._cpu.seconds() is None:
        pytest.skip("no control group for this run's CPU time (not root, or no hierarchy "
                    "that counts without scheduling)")
    return conftest._cpu


def test_a_detached_grandchilds_cpu_time_is_counted(account):
    before = account.seconds()
    # In a session of its own, not waited for by this process: what getrusage
    # of the children would miss.
    subprocess.run(["setsid", "--fork", sys.executable, "-c", BUSY], check=True)
    deadline = time.monotonic() + 10
    while account.seconds() - before < 0.3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 0.3 <= account.seconds() - before < 5


def test_a_run_leaves_no_group_behind(account):
    probe = ("import cpu_account\n"
             "account = cpu_account.CpuAccount()\n"
             "group = account.group\n"
             "account.close()\n"
             "print(group is not None, group.exists())")
    made = subprocess.run([sys.executable, "-c", probe], cwd=REPO / "tests",
                          capture_output=True, text=True, check=True)
    assert made.stdout.split() == ["True", "False"]
