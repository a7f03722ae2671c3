"""A Gloo launch keeps the launching environment's secrets off the ranks'
command lines (docker/env/patches/horovod-0.28.1-gloo-rank-environment.patch):
a real horovodrun --gloo, whose ranks read every process's command line on
the host while the job runs."""

import json
import os
import secrets
import subprocess

from conftest import BIN, REPO

# Each rank: which of the two values some process's command line holds.
SCRIPT = """\
import json, os, pathlib
found = {name: False for name in ("SERVICE_API_KEY", "MY_SETTING")}
for proc in pathlib.Path("/proc").iterdir():
    try:
        line = (proc / "cmdline").read_bytes()
    except OSError:
        continue
    for name in found:
        found[name] |= os.environ[name].encode() in line
print(json.dumps(found), flush=True)
"""


def test_a_token_of_the_launching_shell_is_on_no_command_line_and_hvt_rank_env_adds_names():
    token = secrets.token_hex(16)
    env = {**os.environ, "SERVICE_API_KEY": token, "MY_SETTING": "setting-" + token[:8],
           "HVT_RANK_ENV": "MY_*"}
    result = subprocess.run([str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                             str(BIN / "python"), "-c", SCRIPT], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    said = [json.loads(line.split("]<stdout>:", 1)[-1]) for line in result.stdout.splitlines()
            if line.rstrip().endswith("}")]
    assert result.returncode == 0 and len(said) == 2, result.stdout + result.stderr
    # The variable HVT_RANK_ENV names is passed as Horovod passes any: on
    # the command line (the shell that starts the rank).
    assert said == [{"SERVICE_API_KEY": False, "MY_SETTING": True}] * 2, result.stdout
