"""core/rank_script.py in real processes: two ranks that mpirun starts meet
at a real start barrier on loopback, MPI started before the script's first
line; the script sees sys.argv, sys.path[0] and __name__ as `python SCRIPT`
gives them, and its exit code is the rank's; a missing script is one line."""

import json
import os
import shlex
import socket
import subprocess
import sys

from conftest import REPO

# Each rank says its line in one write: print's pieces of two ranks interleave
# in mpirun's output.
SCRIPT = """\
import json, os, sys
started = "mpi4py.MPI" in sys.modules  # the wrapper's MPI_Init, before this line
from mpi4py import MPI
said = json.dumps({"mpi_started": started, "rank": MPI.COMM_WORLD.Get_rank(),
                   "argv": sys.argv, "path0": sys.path[0], "name": __name__})
os.write(1, (said + "\\n").encode())
sys.exit(3)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_ranks_meet_at_the_barrier_then_run_the_script_as_python_would(tmp_path):
    script = tmp_path / "scripts" / "my_train.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    barrier = f"127.0.0.1:{free_port()}"
    # Under srun each rank has SLURM_LOCALID; mpirun's local rank stands in.
    rank = (f"SLURM_LOCALID=$OMPI_COMM_WORLD_LOCAL_RANK exec {shlex.quote(sys.executable)} "
            f"-m horovod_train.core.rank_script {shlex.quote(str(script))} --lr 0.1")
    # The token through the environment, as the launcher hands it: -x NAME, no value.
    env = {**os.environ, "HVT_START_BARRIER_TOKEN": "a secret of this job"}
    result = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                             "-x", f"HVT_START_BARRIER={barrier}", "-x", "HVT_START_BARRIER_TOKEN",
                             "sh", "-c", rank],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    said = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 3, result.stdout + result.stderr
    assert sorted(one["rank"] for one in said) == [0, 1], result.stdout + result.stderr
    for one in said:
        assert one["mpi_started"] is True
        assert one["argv"] == [str(script), "--lr", "0.1"]
        assert one["path0"] == str(script.parent) and one["name"] == "__main__"


def test_a_missing_script_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "horovod_train.core.rank_script",
                             "nope.py"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == f"rank_script: error: nope.py: no such script (from {REPO})\n"
